/* Queues page: cluster queues (quota, use, borrowing), local queues, waiting workloads. */
(function () {
  "use strict";

  const socket = document.currentScript.dataset.socket;
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
      const stopped = cq.stop_policy && cq.stop_policy !== "None" ? ` <span class="badge warn">${GS.esc(cq.stop_policy)}</span>` : "";
      const cohort = (cq.cohort_path || []).length ? (cq.cohort_path || []).map(GS.esc).join(" › ") : "—";
      return `<tr><td><strong>${GS.esc(cq.name)}</strong>${fair}${stopped}<div class="note">${GS.esc(cq.strategy)}</div></td><td>${cohort}</td><td>${flavors}</td>
        <td class="num">${cq.pending}</td><td class="num">${cq.admitted}</td><td class="num">${share}</td></tr>`;
    });
    cqs.innerHTML = `<table class="grid"><thead><tr><th>Cluster queue</th><th>Cohort</th><th>Use vs nominal quota, per flavor</th><th class="num">Waiting</th><th class="num">Admitted</th><th class="num" title="Kueue's weighted dominant resource share">Fair share</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
  }

  function renderLocalQueues(state) {
    const docs = Object.values(state.local_queues || {}).sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
    if (!docs.length) {
      lqs.innerHTML = '<div class="empty"><strong>No local queues in use.</strong>Tenants submit into a local queue of their namespace.</div>';
      return;
    }
    const rows = docs.map((lq) => {
      const w = lq.workloads;
      const cq = lq.cluster_queue ? GS.esc(lq.cluster_queue) : '<span class="badge warn" title="Workloads name a LocalQueue that does not exist">missing</span>';
      const f = lq.fair_usage;
      const consumed = f ? Object.entries(f.consumed).map(([r, v]) => `${GS.esc(RESOURCE[r] || r)} ${GS.esc(v)}`).join(", ") || "none" : "";
      const fair = f ? `<span class="badge muted" title="Admitted first: lowest decayed usage (weight ${GS.esc(String(f.weight))})">#${f.rank}</span> ${f.usage === null ? "∞" : GS.esc(String(f.usage))}<div class="note">${consumed}</div>` : '<span class="note">—</span>';
      return `<tr><td>${GS.esc(lq.namespace)}/<strong>${GS.esc(lq.name)}</strong></td><td>${cq}</td><td class="num">${w.Pending || 0}</td><td class="num">${w.Admitted || 0}</td><td class="num">${w.Running || 0}</td><td class="num">${lq.pending_pods}</td><td class="num">${GS.gpus(lq.gpus)}</td><td>${fair}</td></tr>`;
    });
    lqs.innerHTML = `<table class="grid"><thead><tr><th>Local queue</th><th>Cluster queue</th><th class="num">Waiting</th><th class="num">Admitted</th><th class="num">Running</th><th class="num">Pods waiting</th><th class="num">GPUs held</th><th title="Admission fair sharing: order among the cluster queue's local queues, weighted decayed usage, and the decayed usage per resource">Fair usage</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
  }

  function reasonBadge(reason) {
    const kind = reason === "WaitingForQuota" ? "warn" : reason === "Inadmissible" || reason === "NoFit" || reason === "TopologyPlacementFailed" ? "bad" : "muted";
    return `<span class="badge ${kind}">${GS.esc(reason || "—")}</span>`;
  }

  function renderPending(state) {
    const docs = Object.values(state.pending || {}).sort((a, b) => a.rank - b.rank);
    const summary = (state.summary || {}).all || {};
    if (!docs.length) {
      pending.innerHTML = '<div class="empty"><strong>Nothing is waiting.</strong>Every workload has its quota and its nodes.</div>';
      return;
    }
    const starts = state.starts || {};
    const rows = docs.map((w) => {
      const start = (starts[w.uid] || {}).start;
      const eta = start ? `${GS.until(start)}<div class="note">${GS.time(start)}</div>` : '<span class="note" title="No running workload has a known end to go by">unknown</span>';
      const queue = w.cluster_queue ? `${GS.esc(w.cluster_queue)}<div class="note">${GS.esc(w.local_queue)}</div>` : `<span class="note">${GS.esc(w.local_queue)}</span>`;
      const stage = w.state === "Pending" ? "quota" : "nodes";
      return `<tr><td class="num">${w.position || "—"}</td><td><strong>${GS.esc(w.workload)}</strong><div class="note">waits for ${stage} · ${w.pending_pods}/${w.pods} pods</div></td><td>${GS.chip(w.tenant)}</td><td>${queue}</td>
        <td class="num">${w.priority}</td><td>${GS.esc(w.request)}</td><td>${reasonBadge(w.reason)}<div class="reason">${GS.esc(w.message)}</div></td><td>${GS.ago(w.created)}</td><td>${eta}</td></tr>`;
    });
    const more = summary.waiting_for_quota + summary.waiting_for_nodes > docs.length ? `<p class="note">Showing the first ${docs.length}.</p>` : "";
    pending.innerHTML = `<table class="grid"><thead><tr><th class="num" title="Place in its cluster queue (or among admitted workloads waiting for nodes)">#</th><th>Workload</th><th>Tenant</th><th>Queue</th><th class="num">Priority</th><th>Asks for</th><th>Why it waits</th><th>Waiting</th><th>Est. start</th></tr></thead><tbody>${rows.join("")}</tbody></table>${more}`;
  }

  function renderStats(state) {
    const s = (state.summary || {}).all;
    if (!s) return;
    stats.innerHTML = `
      <div class="stat${s.waiting_for_quota ? " warn" : ""}"><div class="label">Waiting for quota</div><div class="value">${s.waiting_for_quota}</div><div class="hint">workloads not yet admitted</div></div>
      <div class="stat"><div class="label">Waiting for nodes</div><div class="value">${s.waiting_for_nodes}</div><div class="hint">admitted, pods not all placed</div></div>
      <div class="stat"><div class="label">Running</div><div class="value">${s.running}</div><div class="hint">${s.admitted} more admitted</div></div>
      <div class="stat"><div class="label">Pods waiting</div><div class="value">${s.pending_pods}</div><div class="hint">for a node</div></div>
      <div class="stat"><div class="label">Cluster queues</div><div class="value">${s.cluster_queues}</div><div class="hint">${s.cluster_queues ? "quotas enforced" : "no quotas: all admitted"}</div></div>`;
  }

  function render(state) {
    renderStats(state);
    renderClusterQueues(state);
    renderLocalQueues(state);
    renderPending(state);
  }

  GS.live(socket, render);
  setInterval(() => GS.view && GS.view.id !== null && renderPending(GS.view.state), 15000);
})();
