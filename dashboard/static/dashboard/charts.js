/* Small wrappers around uPlot (installed from npm, copied into static/dashboard/vendor). */
(function () {
  "use strict";

  const GS = (window.GS = window.GS || {});

  // One chart per container, re-created only when its series change shape.
  GS.lineChart = function (container, { times, series, yLabel, height }) {
    if (typeof uPlot === "undefined") {
      container.innerHTML = '<p class="note">Charts unavailable: the front-end packages are not installed (<code>make frontend</code>).</p>';
      return;
    }
    const data = [times, ...series.map((s) => s.values)];
    const few = times.length < 3; // lines need two points: show the points themselves
    const shape = `${series.map((s) => s.label).join("|")}|${few}`;
    if (container._chart && container._shape === shape) {
      container._chart.setData(data);
      return;
    }
    if (container._chart) container._chart.destroy();
    container.innerHTML = "";
    const width = Math.max(280, container.clientWidth || 400);
    container._shape = shape;
    container._chart = new uPlot(
      {
        width,
        height: height || 180,
        scales: {
          // Always the last hour, ending at the newest point (one point alone would span years).
          x: { time: true, range: (u, min, max) => [max - 3600, max + 60] },
          y: { range: (u, min, max) => [0, Math.max(1, max * 1.15)] },
        },
        // Wall-clock hours and minutes in the browser's zone (uPlot's default picks a date
        // format by the range, which reads like a date for an hour-long axis).
        axes: [{ stroke: "#667085", grid: { stroke: "#eef0f4" }, values: (u, splits) => splits.map((v) => GS.clock(v)) }, { label: yLabel, stroke: "#667085", grid: { stroke: "#eef0f4" }, size: 48 }],
        series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: s.width || 2, dash: s.dash, fill: s.fill, points: { show: few }, spanGaps: true }))],
        legend: { live: false },
      },
      data,
      container,
    );
  };
})();
