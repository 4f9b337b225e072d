/* Tenants page: who holds what now (live), and over the last hour held vs busy GPUs, overRequest
 * and right-sizing advice (sampled). The table's numbers and the charts come from the same
 * minutes (scheduling/selectors/efficiency.py), so they agree by construction. */
(function () {
  "use strict";

  const socket = document.currentScript.dataset.socket;
  const table = document.getElementById("tenants");
  const efficiency = document.getElementById("efficiency");
  const adviceBox = document.getElementById("advice");
  const windowNote = document.getElementById("window-note");
  const charts = document.getElementById("charts");
  const ADVICE_PAGE = 10;
  let advicePage = 0;
  let lastState = null;

  function quotaText(quota) {
    if (!quota) return '<span class="note" title="No local queue of this namespace feeds a cluster queue">none</span>';
    const shared = quota.shared_with.length ? `<div class="note">shared with ${quota.shared_with.map(GS.esc).join(", ")}</div>` : "";
    return `${GS.gpus(quota.gpus)} <span class="note">(${quota.cluster_queues.map(GS.esc).join(", ")})</span>${shared}`;
  }

  /* The tenant's quota form (dashboard/actions.py tenant_quota): a page of its own, one row per
   * flavor and resource of its ClusterQueues. */
  function quotaForm(t) {
    if (!t.quota) return "";
    return `<a class="quota-link" href="/tenants/${encodeURIComponent(t.name)}/quota/">Change quota</a>`;
  }

  function renderTable(state) {
    const docs = Object.values(state.tenants || {}).sort((a, b) => a.name.localeCompare(b.name));
    if (!docs.length) {
      table.innerHTML = '<div class="empty"><strong>No tenants yet.</strong>Tenants are created by an admin (API) or by the simulator.</div>';
      return;
    }
    const rows = docs.map((t) => `<tr data-tenant="${GS.esc(t.name)}"><td>${GS.chip(t.name)}</td><td class="mono">${GS.esc(t.namespace)}</td><td class="num">${t.workloads}</td><td class="num">${t.pending}</td><td class="num">${t.placed}</td>
      <td class="num held-now"><strong>${GS.gpus(t.gpus)}</strong></td><td class="num">${t.mig}</td><td>${quotaText(t.quota)}</td><td>${quotaForm(t)}</td></tr>`);
    table.innerHTML = `<table class="grid"><thead><tr><th>Tenant</th><th>Namespace</th><th class="num">Active workloads</th><th class="num">Pods waiting</th><th class="num">Pods placed</th><th class="num">GPUs held</th><th class="num">MIG slices</th><th>GPU quota</th><th>Change quota</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
  }

  function measured(state) {
    return ((state.window || {}).all) || { minutes: 0 };
  }

  function collecting(what) {
    return `<div class="empty"><strong>Collecting data.</strong>${what} The telemetry ingester rolls up each closed minute; the first numbers appear a minute or two after GPUs are first held.</div>`;
  }

  function renderEfficiency(state) {
    const w = measured(state);
    windowNote.textContent = w.minutes
      ? `Measured: ${w.minutes} minute${w.minutes === 1 ? "" : "s"}, ${GS.clock(w.first)} – ${GS.clock(w.last + 60)} (${GS.zone()}).`
      : "";
    if (!w.minutes) {
      efficiency.innerHTML = collecting("No minute of telemetry in the last hour yet.");
      return;
    }
    const docs = Object.values(state.efficiency || {}).sort((a, b) => a.tenant.localeCompare(b.tenant));
    if (!docs.length) {
      efficiency.innerHTML = '<div class="empty"><strong>No GPUs held in the measured minutes.</strong></div>';
      return;
    }
    const rows = docs.map((e) => `<tr data-tenant="${GS.esc(e.tenant)}"><td>${GS.chip(e.tenant)}</td>
      <td class="num held">${e.held.toFixed(2)}</td><td class="num busy">${e.busy_p95 === null ? "–" : e.busy_p95.toFixed(2)}</td>
      <td class="num over">${e.over_request === null ? "—" : `${e.over_request.toFixed(1)}×`}</td><td class="num">${e.minutes}</td></tr>`);
    efficiency.innerHTML = `<table class="grid"><thead><tr><th>Tenant</th><th class="num">GPUs held (mean)</th><th class="num">GPUs busy (p95)</th><th class="num">overRequest</th><th class="num">Minutes</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
  }

  function renderAdvice(state) {
    const w = measured(state);
    const docs = Object.values(state.advice || {}).sort((a, b) => a.rank - b.rank);
    if (!w.minutes) {
      adviceBox.innerHTML = collecting("Advice needs each pod's measured minutes.");
      return;
    }
    if (!docs.length) {
      adviceBox.innerHTML = '<div class="empty"><strong>Nothing to right-size.</strong>Every measured workload asks for about what it uses.</div>';
      return;
    }
    const pages = Math.ceil(docs.length / ADVICE_PAGE);
    advicePage = Math.min(advicePage, pages - 1);
    const shown = docs.slice(advicePage * ADVICE_PAGE, (advicePage + 1) * ADVICE_PAGE);
    const rows = shown.map((a) => `<tr><td>${GS.chip(a.tenant)}</td><td>${GS.esc(a.workload)}</td><td class="num">${a.pods}</td>
      <td class="num">${a.asks.toFixed(2)}</td><td class="num">${a.busy_p95.toFixed(2)}</td><td><code>${GS.esc(a.instead)}</code></td>
      <td class="num">${a.saves.toFixed(2)}</td><td class="num"><strong>${a.saves_total.toFixed(2)}</strong></td></tr>`);
    const more = w.advised > docs.length ? ` (the ${docs.length} largest of ${w.advised})` : "";
    adviceBox.innerHTML = `<table class="grid"><thead><tr><th>Tenant</th><th>Workload</th><th class="num">Pods</th><th class="num">Asks per pod</th><th class="num">p95 busy per pod</th><th>Request instead</th><th class="num">Saves per pod</th><th class="num">Saves in all</th></tr></thead><tbody>${rows.join("")}</tbody></table>
      <div class="pager"><button type="button" data-step="-1"${advicePage ? "" : " disabled"}>‹ Previous</button>
      <span>page ${advicePage + 1} of ${pages}${more}</span>
      <button type="button" data-step="1"${advicePage < pages - 1 ? "" : " disabled"}>Next ›</button></div>`;
  }

  adviceBox.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-step]");
    if (!button || !lastState) return;
    advicePage = Math.max(0, advicePage + Number(button.dataset.step));
    renderAdvice(lastState);
  });

  function renderCharts(state) {
    const tenants = Object.values(state.tenants || {}).sort((a, b) => a.name.localeCompare(b.name));
    const series = state.series || {};
    const w = measured(state);
    for (const tenant of tenants) {
      let card = charts.querySelector(`[data-tenant="${CSS.escape(tenant.name)}"]`);
      if (!card) {
        card = document.createElement("div");
        card.className = "chart-card";
        card.dataset.tenant = tenant.name;
        card.innerHTML = `<h3>${GS.chip(tenant.name)}</h3><div class="note borrowing"></div><div class="plot"></div>`;
        charts.appendChild(card);
      }
      const plot = card.querySelector(".plot");
      const points = series[tenant.name];
      if (!w.minutes || !points || !points.t.length) {
        if (plot._chart) plot._chart.destroy();
        plot._chart = null;
        plot.innerHTML = w.minutes
          ? '<div class="empty"><strong>No GPUs held in the measured minutes.</strong></div>'
          : collecting("");
        continue;
      }
      const color = GS.tenantColor(tenant.name);
      const lines = [
        { label: "held", values: points.held, color: "#1d2433", width: 2 },
        { label: "busy (avg)", values: points.busy, color, width: 2, fill: `${color}33` },
        { label: "busy (peak)", values: points.peak, color, width: 1, dash: [4, 3] },
      ];
      if (tenant.quota) lines.push({ label: "nominal quota", values: points.t.map(() => tenant.quota.gpus), color: "#c6362b", width: 1.5, dash: [8, 4] });
      // Held above the nominal quota is not an overrun: Kueue-style borrowing of what the
      // cohort's other queues leave unused, which they can reclaim.
      const peakHeld = Math.max(...points.held);
      card.querySelector(".borrowing").textContent = tenant.quota && peakHeld > tenant.quota.gpus
        ? `Held up to ${GS.gpus(peakHeld)} GPUs, over its nominal quota of ${GS.gpus(tenant.quota.gpus)}: borrowed from its cohort's unused quota (it can be reclaimed when the lending queues need it).`
        : "";
      GS.lineChart(plot, { times: points.t, series: lines, yLabel: "GPUs" });
    }
    for (const card of [...charts.children]) {
      if (!(state.tenants || {})[card.dataset.tenant]) card.remove();
    }
    if (!tenants.length) charts.innerHTML = "";
  }

  GS.live(socket, (state, touched) => {
    lastState = state;
    if (!touched || touched.tenants) renderTable(state);
    if (!touched || touched.efficiency || touched.window) renderEfficiency(state);
    if (!touched || touched.advice || touched.window) renderAdvice(state);
    if (!touched || touched.series || touched.tenants || touched.window) renderCharts(state);
  });
})();
