/* Node detail page: the topology drawn large, the link matrix, each GPU's holders and DCGM
 * readings, and the last hour per GPU. */
(function () {
  "use strict";

  const script = document.currentScript;
  const socket = script.dataset.socket;
  const name = script.dataset.node;
  const $ = (id) => document.getElementById(id);
  const LINES = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f"];

  function mib(value) {
    return value === null || value === undefined ? "—" : `${(value / 1024).toFixed(1)} GiB`;
  }

  function renderMatrix(node, topology) {
    if (!topology || !topology.links.length) {
      $("matrix").innerHTML = '<p class="note">No topology reported: every GPU pair counts as one node apart.</p>';
      return;
    }
    const ids = node.gpus.map((g) => g.i);
    const head = `<tr><th></th>${ids.map((i) => `<th>GPU${i}</th>`).join("")}<th>NUMA</th></tr>`;
    const rows = topology.links.map((row, r) => {
      const cells = row.map((link) => {
        const kind = link.startsWith("NV") ? "NV" : link;
        return `<td class="link-${GS.esc(kind)}" title="${GS.esc(link)}">${GS.esc(link)}</td>`;
      });
      return `<tr><th>GPU${ids[r]}</th>${cells.join("")}<td>${topology.numa[r]}</td></tr>`;
    });
    $("matrix").innerHTML = `<table class="matrix">${head}${rows.join("")}</table>
      <p class="note">NV# = NVLink (# links) · PIX = one PCIe switch · PXB = several switches · PHB = host bridge · NODE = same NUMA node · SYS = across sockets</p>`;
  }

  function renderFacts(node, topology, telemetry) {
    const fresh = Object.values(telemetry || {});
    const at = fresh.length ? Math.max(...fresh.map((g) => g.at || 0)) : null;
    const stale = fresh.some((g) => g.stale);
    const badges = [];
    if (node.cordoned) badges.push('<span class="badge bad">cordoned</span>');
    if (!fresh.length) badges.push('<span class="badge muted">no metrics</span>');
    else if (stale) badges.push(`<span class="badge warn">stale · ${GS.ago(at)}</span>`);
    else badges.push(`<span class="badge ok">DCGM · ${GS.ago(at)}</span>`);
    $("badges").innerHTML = badges.join(" ");
    const numa = topology && topology.numa_cpus.length ? topology.numa_cpus.map((c, i) => (c ? `NUMA ${i}: ${c} CPUs` : "")).filter(Boolean).join(" · ") : "—";
    const slices = GS.migSlices(node);
    const mig = slices.length ? `<dt>MIG slices</dt><dd id="mig-slices">${GS.migMeter(slices)}<div>${GS.migText(slices)} <span class="note">used</span></div></dd>` : "";
    $("facts").innerHTML = `<dt>GPUs</dt><dd>${node.gpus.length} × ${GS.esc(GS.shortModel(node.model))} (${mib(node.gpu_memory_mib)})</dd>${mig}
      <dt>CPU</dt><dd>${(node.cpu[0] / 1000).toFixed(1)} of ${(node.cpu[1] / 1000).toFixed(0)} cores requested</dd>
      <dt>Memory</dt><dd>${mib(node.memory[0])} of ${mib(node.memory[1])} requested</dd>
      <dt>NUMA</dt><dd>${numa}</dd><dt>Source</dt><dd>${GS.esc(node.source)}</dd>
      <dt>Schedulable</dt><dd>${node.cordoned ? "no (cordoned)" : "yes"}</dd>`;
  }

  function renderGpus(node, telemetry) {
    const rows = node.gpus.map((gpu) => {
      const t = { ...((telemetry || {})[String(gpu.i)] || {}) }; // a copy: blanked below when free
      const holders = gpu.holders.length
        ? gpu.holders.map((h) => `<div>${GS.chip(h[0])} <span class="mono">${GS.esc(h[2])}</span> <span class="note">${h[4] !== null && h[4] !== undefined ? `MIG slot ${h[4]}` : `${h[3] / 1000} GPU`}${h[5] ? ", reserved" : ""}</span></div>`).join("")
        : '<span class="note">free</span>';
      // Free: the latest reading may be the previous holder's, so none is shown unless DCGM
      // still sees pods on the GPU in a reading taken after its last release (then it is flagged).
      const lingering = !gpu.holders.length && (t.pods || []).length && (!gpu.released || t.at > gpu.released);
      if (!gpu.holders.length && !lingering) {
        t.busy = null;
        t.fb_used_mib = null;
      }
      const busy = t.busy === null || t.busy === undefined ? "—" : `${t.busy}%${lingering ? ` <span class="badge warn" title="DCGM still sees ${GS.esc(t.pods.join(", "))}">pods on a free GPU</span>` : ""}`;
      // A MIG GPU's instances report their own free memory: the GPU's size is the node's.
      const size = gpu.mig ? node.gpu_memory_mib : t.fb_free_mib !== null && t.fb_free_mib !== undefined ? t.fb_used_mib + t.fb_free_mib : null;
      const fb = t.fb_used_mib !== undefined && t.fb_used_mib !== null ? `${mib(t.fb_used_mib)}${size ? ` / ${mib(size)}` : ""}` : "—";
      const mig = gpu.mig ? `<div class="note">MIG: ${gpu.mig.map(GS.esc).join(", ")}</div>` : "";
      // MIG slices are not GPU milli: a MIG GPU's allocation is its slices held.
      const allocated = gpu.mig ? `${gpu.holders.filter((h) => h[4] !== null && h[4] !== undefined).length}/${gpu.mig.length} slices` : `${gpu.used / 1000}`;
      const age = t.at ? `${GS.ago(t.at)}${t.stale ? ' <span class="badge warn">stale</span>' : ""}` : "—";
      return `<tr><td class="num">${gpu.i}</td><td>${GS.esc(gpu.sharing)}${mig}</td><td>${holders}</td><td class="num">${allocated}</td><td class="num">${busy}</td><td class="num">${fb}</td>
        <td class="num">${t.power_w ?? "—"}</td><td class="num">${t.temp_c ?? "—"}</td><td class="num">${t.xid ?? "—"}</td><td>${age}</td></tr>`;
    });
    $("gpus").innerHTML = `<table class="grid"><thead><tr><th class="num">GPU</th><th>Sharing</th><th>Held by</th><th class="num">Allocated</th><th class="num">Busy</th><th class="num">Framebuffer</th><th class="num">Power W</th><th class="num">Temp °C</th><th class="num">XID</th><th>Reading</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
  }

  function renderSeries(series) {
    const gpus = Object.keys(series || {}).sort((a, b) => Number(a) - Number(b));
    for (const [id, field, scale] of [["busy-chart", "busy", 1], ["fb-chart", "fb_used_mib", 1 / 1024]]) {
      const container = $(id);
      if (!gpus.length) {
        container.innerHTML = '<div class="empty"><strong>No rollups in the last hour.</strong>Per-GPU history fills as DCGM samples are ingested.</div>';
        continue;
      }
      const times = series[gpus[0]].t;
      const lines = gpus.map((g, k) => ({
        label: `GPU ${g}`,
        color: LINES[k % LINES.length],
        width: 1.5,
        values: times.map((t) => {
          const at = series[g].t.indexOf(t);
          const value = at < 0 ? null : series[g][field][at];
          return value === null ? null : value * scale;
        }),
      }));
      GS.lineChart(container, { times, series: lines, yLabel: field === "busy" ? "%" : "GiB", height: 200 });
    }
  }

  GS.live(socket, (state) => {
    const node = (state.node || {})[name];
    if (!node) {
      $("diagram").innerHTML = '<div class="empty"><strong>This node is gone.</strong>It is no longer registered.</div>';
      return;
    }
    const topology = node.topology ? state.topologies[node.topology] : null;
    const telemetry = state.telemetry || {};
    const busy = {};
    let stale = false;
    for (const [index, t] of Object.entries(telemetry)) {
      busy[index] = t.busy;
      stale = stale || t.stale;
    }
    $("diagram").innerHTML = GS.nodeSvg(node, topology, { state: stale ? "stale" : "fresh", busy }, { size: "detail" });
    renderMatrix(node, topology);
    renderFacts(node, topology, telemetry);
    renderGpus(node, telemetry);
    renderSeries(state.series);
  });
})();
