/* Tenants page: who holds what now (live), and requested vs used vs quota over the last hour. */
(function () {
  "use strict";

  const socket = document.currentScript.dataset.socket;
  const table = document.getElementById("tenants");
  const charts = document.getElementById("charts");

  function quotaText(quota) {
    if (!quota) return '<span class="note" title="No local queue of this namespace feeds a cluster queue">none</span>';
    const shared = quota.shared_with.length ? `<div class="note">shared with ${quota.shared_with.map(GS.esc).join(", ")}</div>` : "";
    return `${GS.gpus(quota.gpus)} <span class="note">(${quota.cluster_queues.map(GS.esc).join(", ")})</span>${shared}`;
  }

  function renderTable(state) {
    const docs = Object.values(state.tenants || {}).sort((a, b) => a.name.localeCompare(b.name));
    if (!docs.length) {
      table.innerHTML = '<div class="empty"><strong>No tenants yet.</strong>Tenants are created by an admin (API) or by the simulator.</div>';
      return;
    }
    const rows = docs.map((t) => `<tr><td>${GS.chip(t.name)}</td><td class="mono">${GS.esc(t.namespace)}</td><td class="num">${t.workloads}</td><td class="num">${t.pending}</td><td class="num">${t.placed}</td>
      <td class="num"><strong>${GS.gpus(t.gpus)}</strong></td><td class="num">${t.mig}</td><td>${quotaText(t.quota)}</td></tr>`);
    table.innerHTML = `<table class="grid"><thead><tr><th>Tenant</th><th>Namespace</th><th class="num">Active workloads</th><th class="num">Pods waiting</th><th class="num">Pods placed</th><th class="num">GPUs held</th><th class="num">MIG slices</th><th>GPU quota</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
  }

  function renderCharts(state) {
    const tenants = Object.values(state.tenants || {}).sort((a, b) => a.name.localeCompare(b.name));
    const series = state.series || {};
    if (!tenants.length) {
      charts.innerHTML = "";
      return;
    }
    for (const tenant of tenants) {
      let card = charts.querySelector(`[data-tenant="${CSS.escape(tenant.name)}"]`);
      if (!card) {
        card = document.createElement("div");
        card.className = "chart-card";
        card.dataset.tenant = tenant.name;
        card.innerHTML = `<h3>${GS.chip(tenant.name)}</h3><div class="plot"></div>`;
        charts.appendChild(card);
      }
      const plot = card.querySelector(".plot");
      const points = series[tenant.name];
      if (!points || !points.t.length) {
        if (plot._chart) plot._chart.destroy();
        plot._chart = null;
        plot.innerHTML = '<div class="empty"><strong>No DCGM samples in the last hour.</strong>The chart fills as the telemetry ingester rolls up each minute.</div>';
        continue;
      }
      const color = GS.tenantColor(tenant.name);
      const lines = [
        { label: "requested (held)", values: points.held, color: "#1d2433", width: 2 },
        { label: "used (avg)", values: points.used, color, width: 2, fill: `${color}33` },
        { label: "used (peak)", values: points.peak, color, width: 1, dash: [4, 3] },
      ];
      if (tenant.quota) lines.push({ label: "quota", values: points.t.map(() => tenant.quota.gpus), color: "#c6362b", width: 1.5, dash: [8, 4] });
      GS.lineChart(plot, { times: points.t, series: lines, yLabel: "GPUs" });
    }
    for (const card of [...charts.children]) {
      if (!(state.tenants || {})[card.dataset.tenant]) card.remove();
    }
  }

  GS.live(socket, (state) => {
    renderTable(state);
    renderCharts(state);
  });
})();
