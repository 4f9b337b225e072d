/* Placements page: the live decision feed and, on click, one decision's explanation. */
(function () {
  "use strict";

  const socket = document.currentScript.dataset.socket;
  const body = document.querySelector("#decisions tbody");
  const detail = document.getElementById("detail");
  let selected = null;
  let rendered = false;

  function outcome(doc) {
    const ok = doc.outcome === "Success";
    return `<span class="badge ${ok ? "ok" : "bad"}">${ok ? "Bound" : GS.esc(doc.outcome)}</span>`;
  }

  function row(doc, fresh) {
    const classes = ["clickable"];
    if (String(doc.id) === selected) classes.push("selected");
    if (fresh) classes.push("flash");
    const score = doc.score === null || doc.score === undefined ? "—" : doc.score.toFixed(1);
    const node = doc.node ? `<a href="/nodes/${encodeURIComponent(doc.node)}/">${GS.esc(doc.node)}</a>` : `<span class="note">${doc.feasible ?? 0}/${doc.nodes ?? "?"} feasible</span>`;
    return `<tr class="${classes.join(" ")}" data-id="${doc.id}" title="${GS.esc(doc.summary)}">
      <td class="mono">${GS.time(doc.at)}</td><td>${GS.esc(doc.pod)}<div class="note">${GS.esc(doc.workload)}</div></td>
      <td>${GS.chip(doc.tenant)}</td><td>${outcome(doc)}</td><td>${node}</td><td class="num">${score}</td></tr>`;
  }

  /* Filters (tenant, outcome, pod or workload name) and pause: while paused the feed is frozen
   * (decisions keep arriving and show on resume). */
  const filters = { tenant: "", outcome: "", text: "" };
  const controls = document.getElementById("decision-filters");
  const count = document.getElementById("decision-count");
  let paused = false;
  let missed = 0;

  function matches(doc) {
    const text = filters.text.toLowerCase();
    const bound = doc.outcome === "Success";
    return (!filters.tenant || doc.tenant === filters.tenant)
      && (!filters.outcome || (filters.outcome === "bound") === bound)
      && (!text || doc.pod.toLowerCase().includes(text) || doc.workload.toLowerCase().includes(text));
  }

  function render(state, touched, forced) {
    if (paused && !forced) {
      missed += 1;
      count.textContent = `paused · ${missed} update${missed === 1 ? "" : "s"} waiting`;
      return;
    }
    const all = Object.values(state.decisions || {}).sort((a, b) => b.id - a.id);
    const tenantSelect = controls.querySelector('[data-filter="tenant"]');
    const tenants = [...new Set(all.map((d) => d.tenant))].sort();
    const current = tenantSelect.value;
    tenantSelect.innerHTML = '<option value="">every tenant</option>' + tenants.map((t) => `<option>${GS.esc(t)}</option>`).join("");
    tenantSelect.value = tenants.includes(current) ? current : "";
    if (!all.length) {
      count.textContent = "";
      body.innerHTML = '<tr><td colspan="6"><div class="empty"><strong>No decisions yet.</strong>They appear here the moment the scheduler places (or fails to place) a pod.</div></td></tr>';
      return;
    }
    const docs = all.filter(matches);
    count.textContent = `${docs.length} of the newest ${all.length} decisions${paused ? " · paused" : ""}`;
    const fresh = rendered && touched && touched.decisions ? touched.decisions : new Set();
    body.innerHTML = docs.length
      ? docs.map((doc) => row(doc, fresh.has(String(doc.id)))).join("")
      : '<tr><td colspan="6"><div class="empty"><strong>No decision matches the filters.</strong></div></td></tr>';
    rendered = true;
  }

  controls.addEventListener("input", (event) => {
    const key = event.target.dataset.filter;
    if (!key) return;
    filters[key] = event.target.value.trim();
    render(GS.view.state, null, true);
  });
  document.getElementById("pause").addEventListener("click", (event) => {
    paused = !paused;
    missed = 0;
    event.target.setAttribute("aria-pressed", String(paused));
    event.target.textContent = paused ? "Resume" : "Pause";
    render(GS.view.state, null, true);
  });

  function table(headers, rows) {
    return `<table class="grid"><thead><tr>${headers.map((h) => `<th${h.num ? ' class="num"' : ""}>${h.label}</th>`).join("")}</tr></thead><tbody>${rows.join("")}</tbody></table>`;
  }

  /* Which GPUs were taken and why those: their NUMA nodes, PCIe switches and the links between
   * them, against the pod's topology policy. */
  function gpuSet(set) {
    const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
    if (set.mig_slots.length) {
      const slots = set.mig_slots.map(([gpu, slot]) => `GPU ${gpu} slot ${slot}`).join(", ");
      return `<h3 style="margin-top:1rem">MIG instances taken</h3><p id="gpu-set">${GS.esc(slots)}</p>`;
    }
    if (!set.gpus.length) return "";
    const share = set.milli_per_gpu && set.milli_per_gpu < 1000 ? ` (a share: ${set.milli_per_gpu} milli${set.reclaimed ? ", on idle capacity lent by its owners" : ""})` : "";
    const facts = [];
    if (set.numa.length) facts.push(`on ${set.numa.length === 1 ? `NUMA node ${set.numa[0]}` : `NUMA nodes ${set.numa.join(", ")}`}`);
    if (set.switches.length) facts.push(`behind ${plural(set.switches.length, "PCIe switch")}`.replace("switchs", "switches"));
    const links = set.links.map(([kind, n]) => `${n}× ${GS.esc(kind)}`).join(", ");
    if (links) facts.push(`pair links ${links} (weakest first)`);
    const scope = set.scope ? `The set reached <strong>${GS.esc(set.scope)}</strong> scope` : "";
    const policy = set.policy ? `${scope ? "; the" : "The"} pod's policy is <code>${GS.esc(set.policy)}</code>` : "";
    return `<h3 style="margin-top:1rem">GPUs taken</h3><p id="gpu-set"><strong>GPU ${set.gpus.join(", ")}</strong>${share} ${facts.join(", ")}.
      ${scope}${policy}${scope || policy ? "." : ""} The GPU-set chooser takes the free set with the tightest scope first (one NVLink island, then one PCIe switch, one NUMA node), then the set that leaves the largest free block behind.</p>`;
  }

  function explain(doc) {
    const ex = doc.explanation || {};
    const parts = [`<h2>${GS.esc(doc.pod)} ${outcome(doc)}</h2>
      <dl class="facts"><dt>Workload</dt><dd>${GS.esc(doc.workload)}</dd><dt>Tenant</dt><dd>${GS.chip(doc.tenant)}</dd>
      <dt>Node</dt><dd>${doc.node ? `<a href="/nodes/${encodeURIComponent(doc.node)}/">${GS.esc(doc.node)}</a>` : "none"}</dd>
      ${doc.domain ? `<dt>Domain</dt><dd class="domain-path">${doc.domain.map(([level, value]) => `${GS.esc(level)} ${GS.esc(value)}`).join(" › ")}</dd>` : ""}
      <dt>Decided</dt><dd>${GS.time(doc.at)} (${GS.ago(doc.at)})</dd>
      <dt>Feasible</dt><dd>${ex.feasible ?? "?"} of ${ex.nodes ?? "?"} nodes</dd></dl>
      <div class="summary">${GS.esc(ex.summary || doc.summary)}</div>`];
    if (doc.gpu_set) parts.push(gpuSet(doc.gpu_set));
    if (doc.why) parts.push(GS.whyPending(doc.why));
    const candidates = ex.candidates || [];
    if (candidates.length) {
      const plugins = Object.keys(candidates[0].scores || {});
      const best = Math.max(...candidates.map((c) => c.total), 1);
      const rows = candidates.map((c) => {
        const chosen = c.node === doc.node;
        const cells = plugins.map((p) => `<td class="num">${(c.scores[p] ?? 0).toFixed(1)}</td>`).join("");
        return `<tr${chosen ? ' class="selected"' : ""}><td class="${chosen ? "chosen" : ""}">${chosen ? "★ " : ""}${GS.esc(c.node)}</td>${cells}
          <td class="num"><span class="scorebar" style="width:${Math.round((40 * c.total) / best)}px"></span>${c.total.toFixed(1)}</td></tr>`;
      });
      const headers = [{ label: "Node" }, ...plugins.map((p) => ({ label: `${GS.esc(p)}<div class="note">×${candidates[0].weights[p]}</div>`, num: true })), { label: "Total", num: true }];
      parts.push(`<h3>Scores of the best ${candidates.length} candidate(s)</h3>${table(headers, rows)}`);
    }
    const chosen = ex.chosen;
    if (chosen && chosen.filters) {
      const rows = chosen.filters.map((f) => `<tr><td>${GS.esc(f.plugin)}</td><td><span class="badge ${f.code === "Success" ? "ok" : "bad"}">${GS.esc(f.code)}</span></td><td class="reason">${GS.esc(f.reason || "")}</td></tr>`);
      parts.push(`<h3 style="margin-top:1rem">Filters on ${GS.esc(chosen.node)}</h3>${table([{ label: "Plugin" }, { label: "Verdict" }, { label: "Reason" }], rows)}`);
      const notes = Object.entries(chosen.notes || {});
      if (notes.length) {
        parts.push(`<h3 style="margin-top:1rem">Notes</h3><ul>${notes.map(([p, text]) => `<li><strong>${GS.esc(p)}</strong>: ${GS.esc(text)}</li>`).join("")}</ul>`);
      }
    } else if (!candidates.length && !doc.why) {
      parts.push('<p class="note">No node passed every filter; the line above counts the reasons per node.</p>');
    }
    return parts.join("");
  }

  body.addEventListener("click", async (event) => {
    const tr = event.target.closest("tr[data-id]");
    if (!tr || event.target.closest("a")) return;
    selected = tr.dataset.id;
    body.querySelectorAll("tr.selected").forEach((r) => r.classList.remove("selected"));
    tr.classList.add("selected");
    detail.innerHTML = '<p class="note">Loading…</p>';
    const response = await fetch(`/decisions/${selected}.json`, { credentials: "same-origin" });
    detail.innerHTML = response.ok ? explain(await response.json()) : '<div class="empty"><strong>Gone.</strong>This decision was pruned.</div>';
  });

  GS.live(socket, render);
})();
