/* Queues page: cluster queues (quota, use, borrowing), local queues, waiting workloads. */
(function () {
  "use strict";

  const socket = document.currentScript.dataset.socket;
  const source = document.getElementById("queue-source");
  const stats = document.getElementById("stats");
  const cqs = document.getElementById("cluster-queues");
  const lqs = document.getElementById("local-queues");
  const pending = document.getElementById("pending");

  const RESOURCE = { "nvidia.com/gpu": "GPU", cpu: "CPU", memory: "Memory" };

  function usage(resource) {
    const used = Number(resource.used);
    const nominal = Number(resource.nominal);
    const label = RESOURCE[resource.name] || resource.name;
    let bar = "";
    if (Number.isFinite(used) && Number.isFinite(nominal) && nominal > 0) {
      const within = Math.min(100, (100 * used) / nominal);
      const over = used > nominal ? " over" : "";
      bar = `<span class="meter" style="display:inline-block;width:110px;vertical-align:middle"><span style="width:${within}%;background:${over ? "#c27c0e" : "#4e79a7"}"></span></span>`;
    }
    const borrowed = resource.borrowed && resource.borrowed !== "0" ? ` <span class="badge warn">+${GS.esc(resource.borrowed)} borrowed</span>` : "";
    const limit = resource.borrowing_limit !== null && resource.borrowing_limit !== undefined ? ` <span class="note">(borrow ≤ ${GS.esc(resource.borrowing_limit)})</span>` : "";
    return `<div>${label} ${bar} <strong>${GS.esc(resource.used)}</strong> / ${GS.esc(resource.nominal)}${borrowed}${limit}</div>`;
  }

  function renderClusterQueues(state) {
    const docs = Object.values(state.cluster_queues || {}).sort((a, b) => a.name.localeCompare(b.name));
    if (!docs.length) {
      cqs.innerHTML = '<div class="empty"><strong>No cluster queues configured.</strong>Workloads are admitted as they arrive, without quotas. <code>python manage.py applyqueues demo</code> sets up the demo\'s queues.</div>';
      return;
    }
    const rows = docs.map((cq) => {
      const flavors = cq.flavors.map((f) => `<div style="margin-bottom:.25rem"><span class="badge muted">${GS.esc(f.flavor)}</span>${f.resources.map(usage).join("")}</div>`).join("");
      const share = cq.weighted_share ? `${cq.weighted_share}${cq.dominant_resource ? ` <span class="note">(${GS.esc(RESOURCE[cq.dominant_resource] || cq.dominant_resource)})</span>` : ""}` : "0";
      const fair = cq.admission_mode === "UsageBasedAdmissionFairSharing" ? ' <span class="badge muted" title="LocalQueues are served by their decayed usage">fair usage</span>' : "";
      const held = cq.stop_policy && cq.stop_policy !== "None" ? ` <span class="badge warn">${GS.esc(cq.stop_policy)}</span>` : "";
      const terminating = ` <span class="badge bad" title="Deleted from the cluster at ${GS.esc(cq.deleted_from_cluster_at)}; kept, admitting nothing, until its admitted workloads are gone">terminating: gone from the cluster</span>`;
      const stopped = cq.deleted_from_cluster_at ? terminating : held;
      const pinned = cq.consolidation === "Never" ? ' <span class="badge muted" title="gpusched.io/consolidation: Never: its running work is never moved to make room for a gang, and its gangs never move others\' work">no consolidation</span>' : "";
      const cohort = (cq.cohort_path || []).length ? (cq.cohort_path || []).map(GS.esc).join(" › ") : "—";
      return `<tr><td><strong>${GS.esc(cq.name)}</strong>${fair}${stopped}${pinned}<div class="note">${GS.esc(cq.strategy)}</div></td><td>${cohort}</td><td>${flavors}</td>
        <td class="num">${cq.pending}</td><td class="num">${cq.admitted}</td><td class="num">${share}</td></tr>`;
    });
    cqs.innerHTML = `<table class="grid"><thead><tr><th>Cluster queue</th><th>Cohort</th><th>Use vs nominal quota, per flavor</th><th class="num" title="Workloads not admitted yet">Waiting for quota</th><th class="num" title="Workloads holding quota, running or not">Admitted</th><th class="num" title="Kueue's weighted dominant resource share">Fair share</th></tr></thead><tbody>${rows.join("")}</tbody></table>
      <p class="note" id="fair-share-note"><strong>Fair share</strong> is Kueue's weighted dominant resource share: of the resource the queue borrows most (in brackets), what it uses above its nominal quota, per mille of what its cohort could lend it, divided by its weight. What its admitted workloads hold but leave idle (DCGM) counts once more as use (<code>FAIR_SHARE_IDLE_WEIGHT</code>, default 1; 0 is Kueue's request-only share), so a queue within its quota by requests shows more than 0 when requests plus idle exceed its quota. 0 = within its own quota, idle included; when queues compete for borrowed capacity, the lower share goes first.</p>`;
  }

  function renderLocalQueues(state) {
    const docs = Object.values(state.local_queues || {}).sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
    if (!docs.length) {
      lqs.innerHTML = '<div class="empty"><strong>No local queues in use.</strong>Tenants submit into a local queue of their namespace.</div>';
      return;
    }
    const kueueAdmits = ((state.source || {}).current || {}).kind === "kueue";
    const unknown = kueueAdmits ? '<span class="note" title="Kueue admits: its queues are not read">Kueue\'s</span>' : '<span class="badge warn" title="Workloads name a LocalQueue that does not exist">missing</span>';
    const rows = docs.map((lq) => {
      const cq = lq.cluster_queue ? GS.esc(lq.cluster_queue) : unknown;
      const f = lq.fair_usage;
      const consumed = f ? Object.entries(f.consumed).map(([r, v]) => `${GS.esc(RESOURCE[r] || r)} ${GS.esc(v)}`).join(", ") || "none" : "";
      const fair = f ? `<span class="badge muted" title="Admitted first: lowest decayed usage (weight ${GS.esc(String(f.weight))})">#${f.rank}</span> ${f.usage === null ? "∞" : GS.esc(String(f.usage))}<div class="note">${consumed}</div>` : '<span class="note">—</span>';
      return `<tr><td>${GS.esc(lq.namespace)}/<strong>${GS.esc(lq.name)}</strong></td><td>${cq}</td><td class="num">${lq.waiting_for_quota}</td><td class="num">${lq.admitted}</td><td class="num">${lq.running}</td><td class="num">${lq.pods_waiting_for_quota}</td><td class="num">${lq.pods_waiting_for_node}</td><td class="num">${GS.gpus(lq.gpus)}</td><td>${fair}</td></tr>`;
    });
    lqs.innerHTML = `<table class="grid"><thead><tr><th>Local queue</th><th>Cluster queue</th><th class="num" title="Workloads not admitted yet">Waiting for quota</th><th class="num" title="Workloads holding quota, running or not">Admitted</th><th class="num" title="Of the admitted, those running">Running</th><th class="num" title="Pods of workloads not admitted yet">Pods waiting for quota</th><th class="num" title="Pods of admitted workloads not placed yet">Pods waiting for a node</th><th class="num">GPUs held</th><th title="Admission fair sharing: order among the cluster queue's local queues, weighted decayed usage, and the decayed usage per resource">Fair usage</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
  }

  function reasonBadge(reason) {
    const kind = reason === "WaitingForQuota" ? "warn" : reason === "Inadmissible" || reason === "NoFit" || reason === "TopologyPlacementFailed" ? "bad" : "muted";
    return `<span class="badge ${kind}">${GS.esc(reason || "—")}</span>`;
  }

  /* Waiting workloads: filtered (tenant, queue, stage, reason, name), grouped by cluster queue so
   * each position reads within its own line, PAGE_SIZE rows a page; "Pause" freezes the table
   * (updates keep arriving and are applied on resume). */
  const PAGE_SIZE = 25;
  const filters = { tenant: "", queue: "", stage: "", reason: "", text: "" };
  let page = 0;
  let paused = false;
  let missed = 0;
  let controlsBuilt = false;

  function stageOf(w) {
    return w.state === "Pending" ? "quota" : "nodes";
  }

  function options(select, values, label) {
    const current = select.value;
    select.innerHTML = `<option value="">${label}</option>` + values.map((v) => `<option value="${GS.esc(v)}">${GS.esc(v)}</option>`).join("");
    select.value = values.includes(current) ? current : "";
  }

  function buildControls() {
    pending.innerHTML = `<div class="filters" id="pending-filters">
        <select data-filter="tenant" aria-label="Tenant"></select>
        <select data-filter="queue" aria-label="Cluster queue"></select>
        <select data-filter="stage" aria-label="Waiting for"><option value="">waiting for anything</option><option value="quota">waiting for quota</option><option value="nodes">waiting for nodes</option></select>
        <select data-filter="reason" aria-label="Reason"></select>
        <input type="search" data-filter="text" placeholder="workload name…" aria-label="Workload name">
        <button type="button" id="pause" aria-pressed="false">Pause</button>
        <span class="note" id="pending-count"></span>
      </div><div id="pending-table"></div>`;
    pending.addEventListener("input", (event) => {
      const key = event.target.dataset.filter;
      if (!key) return;
      filters[key] = event.target.value.trim();
      page = 0;
      renderPending(GS.view.state, true);
    });
    pending.addEventListener("click", (event) => {
      if (event.target.id === "pause") {
        paused = !paused;
        event.target.setAttribute("aria-pressed", String(paused));
        event.target.textContent = paused ? "Resume" : "Pause";
        missed = 0;
        renderPending(GS.view.state, true);
        return;
      }
      const step = event.target.closest("button[data-step]");
      if (step) {
        page = Math.max(0, page + Number(step.dataset.step));
        renderPending(GS.view.state, true);
      }
    });
    controlsBuilt = true;
  }

  function renderPending(state, forced) {
    if (!controlsBuilt) buildControls();
    const count = document.getElementById("pending-count");
    if (paused && !forced) {
      missed += 1;
      count.textContent = `paused · ${missed} update${missed === 1 ? "" : "s"} waiting`;
      return;
    }
    const positions = state.positions || {};
    const all = Object.values(state.pending || {}).sort((a, b) => ((positions[a.uid] || {}).o ?? 1e9) - ((positions[b.uid] || {}).o ?? 1e9));
    const summary = (state.summary || {}).all || {};
    const box = document.getElementById("pending-table");
    const uniq = (values) => [...new Set(values.filter(Boolean))].sort();
    const selects = pending.querySelectorAll("select[data-filter]");
    options(selects[0], uniq(all.map((w) => w.tenant)), "every tenant");
    options(selects[1], uniq(all.map((w) => w.cluster_queue || w.local_queue)), "every queue");
    options(selects[3], uniq(all.map((w) => w.reason)), "every reason");
    if (!all.length) {
      count.textContent = "";
      box.innerHTML = '<div class="empty"><strong>Nothing is waiting.</strong>Every workload has its quota and its nodes.</div>';
      return;
    }
    const text = filters.text.toLowerCase();
    const docs = all.filter((w) => (!filters.tenant || w.tenant === filters.tenant)
      && (!filters.queue || (w.cluster_queue || w.local_queue) === filters.queue)
      && (!filters.stage || stageOf(w) === filters.stage)
      && (!filters.reason || w.reason === filters.reason)
      && (!text || w.workload.toLowerCase().includes(text)));
    const total = (summary.waiting_for_quota || 0) + (summary.waiting_for_nodes || 0);
    const capped = total > all.length ? ` (the first ${all.length} of ${total} in line)` : "";
    count.textContent = `${docs.length} shown of ${all.length} waiting${capped}${paused ? " · paused" : ""}`;
    if (!docs.length) {
      box.innerHTML = '<div class="empty"><strong>No waiting workload matches the filters.</strong></div>';
      return;
    }
    const pages = Math.ceil(docs.length / PAGE_SIZE);
    page = Math.min(page, pages - 1);
    const starts = state.starts || {};
    let group = null;
    const rows = [];
    for (const w of docs.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE)) {
      const key = `${stageOf(w)}|${w.cluster_queue || w.local_queue}`;
      if (key !== group) {
        group = key;
        const line = stageOf(w) === "quota" ? `cluster queue <strong>${GS.esc(w.cluster_queue || w.local_queue)}</strong> · waiting for quota` : "admitted · waiting for nodes";
        rows.push(`<tr class="group"><th colspan="10">${line}</th></tr>`);
      }
      const est = starts[w.uid] || {};
      const basis = est.basis ? `<div class="note eta-basis">${GS.esc(est.basis)}</div>` : "";
      const eta = est.start ? `${GS.until(est.start)}<div class="note">${GS.time(est.start)}</div>${basis}` : `<span class="note" title="${GS.esc(est.unknown || "No running workload has a known end to go by")}">unknown</span>`;
      const queue = w.cluster_queue ? `${GS.esc(w.cluster_queue)}<div class="note">${GS.esc(w.local_queue)}</div>` : `<span class="note">${GS.esc(w.local_queue)}</span>`;
      const position = (positions[w.uid] || {}).p;
      rows.push(`<tr data-uid="${GS.esc(w.uid)}"><td class="num">${position || "—"}</td><td><strong>${GS.esc(w.workload)}</strong><div class="note">${w.pending_pods}/${w.pods} pods waiting</div></td><td>${GS.chip(w.tenant)}</td><td>${queue}</td>
        <td class="num">${w.priority}</td><td>${GS.esc(w.request)}</td><td>${reasonBadge(w.reason)}<div class="reason">${GS.esc(w.message)}</div>${w.would_fit ? `<div class="note would-fit">→ ${GS.esc(w.would_fit)}</div>` : ""}</td><td>${GS.ago(w.created)}</td><td>${eta}</td>
        <td>${GS.actionForm(`/workloads/${w.uid}/cancel/`, "Cancel", `Cancel ${w.tenant}'s workload ${w.workload}? Its pods are deleted and it leaves the queue.`, "danger small")}</td></tr>`);
    }
    const pager = pages > 1 ? `<div class="pager"><button type="button" data-step="-1"${page ? "" : " disabled"}>‹ Previous</button><span>page ${page + 1} of ${pages}</span><button type="button" data-step="1"${page < pages - 1 ? "" : " disabled"}>Next ›</button></div>` : "";
    box.innerHTML = `<table class="grid"><thead><tr><th class="num" title="Place in its own cluster queue (or among admitted workloads waiting for nodes)">#</th><th>Workload</th><th>Tenant</th><th>Queue</th><th class="num">Priority</th><th>Asks for</th><th>Why it waits</th><th>Waiting</th><th>Est. start</th><th></th></tr></thead><tbody>${rows.join("")}</tbody></table>${pager}`;
  }

  const SOURCE = {
    database: "Queues from <code>applyqueues</code> and the REST API.",
    cluster: "Queues are the Kubernetes cluster's Kueue objects, mirrored whole.",
    kueue: "Kueue admits: gpusched reads no queue objects and places the pods Kueue has ungated.",
  };

  function renderSource(state) {
    const s = (state.source || {}).current;
    if (!s) return;
    const applied = s.kind === "cluster" && s.applied_at ? ` <span class="note">Last applied ${GS.ago(s.applied_at)}.</span>` : "";
    const refused = s.error ? `<div class="refused" role="alert"><span class="badge warn">Refused</span> <span class="note">(first ${GS.ago(s.error_since)})</span> <span class="reason">${GS.esc(s.error)}</span><div class="note">The last good queues stay in force; scheduling goes on.</div></div>` : "";
    const notes = (s.notes || []).map((n) => `<div class="note">${GS.esc(n)}</div>`).join("");
    source.innerHTML = `<div>${SOURCE[s.kind] || GS.esc(s.kind)}${applied}</div>${notes}${refused}`;
  }

  function renderStats(state) {
    const s = (state.summary || {}).all;
    if (!s) return;
    stats.innerHTML = `
      <div class="stat${s.waiting_for_quota ? " warn" : ""}"><div class="label">Waiting for quota</div><div class="value">${s.waiting_for_quota}</div><div class="hint">workloads not yet admitted</div></div>
      <div class="stat"><div class="label">Waiting for nodes</div><div class="value">${s.waiting_for_nodes}</div><div class="hint">admitted, pods not all placed</div></div>
      <div class="stat"><div class="label">Admitted</div><div class="value">${s.admitted}</div><div class="hint">holding quota, ${s.running} of them running</div></div>
      <div class="stat"><div class="label">Pods waiting for a node</div><div class="value">${s.pods_waiting_for_node}</div><div class="hint">of admitted workloads; ${s.pods_waiting_for_quota} more wait for quota</div></div>
      <div class="stat"><div class="label">Cluster queues</div><div class="value">${s.cluster_queues}</div><div class="hint">${s.cluster_queues ? "quotas enforced" : "no quotas: all admitted"}</div></div>`;
  }

  function render(state, touched) {
    renderSource(state);
    renderStats(state);
    renderClusterQueues(state);
    renderLocalQueues(state);
    if (!touched || touched.pending || touched.positions || touched.starts) renderPending(state, !touched);
  }

  GS.live(socket, render);
  // "waiting 3m" and "in 5m" move with the clock (not while paused).
  setInterval(() => GS.view && GS.view.id !== null && !paused && renderPending(GS.view.state), 15000);
})();
