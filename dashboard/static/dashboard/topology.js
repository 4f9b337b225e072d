/* A node drawn as its topology: NUMA nodes -> PCIe switches (labelled) -> GPUs, NVLink below.
 * Each GPU has its number in a light band on top, and below it is tinted by the tenant(s)
 * holding it (width by share) and filled from the bottom by its DCGM utilization; reserved
 * holders are dashed; MIG GPUs show their slices.
 * GS.nodeSvg(node, topology, telemetry, {size: "card" | "detail"}) returns an SVG string;
 * GS.migSlices(node) counts a node's MIG slices per profile, used and free.
 */
(function () {
  "use strict";

  const GS = (window.GS = window.GS || {});
  const SIZES = {
    // band: the strip on top of a GPU that holds its number; switchLabel: the row above a PCIe
    // switch's GPUs that names it.
    card: { w: 24, h: 32, band: 10, gap: 3, pad: 3, numaPad: 5, numaLabel: 11, numaGap: 6, font: 8, switchLabel: 8, switchFont: 6.5, bus: 14 },
    detail: { w: 54, h: 72, band: 16, gap: 6, pad: 6, numaPad: 10, numaLabel: 18, numaGap: 14, font: 12, switchLabel: 14, switchFont: 10, bus: 30 },
  };

  function layout(node, topology) {
    const count = node.gpus.length;
    const numaOf = (i) => (topology && topology.numa.length === count ? topology.numa[i] : 0);
    const switchOf = (i) => (topology && topology.switch.length === count ? topology.switch[i] : i);
    const numas = new Map();
    node.gpus.forEach((gpu, position) => {
      const numa = numaOf(position);
      if (!numas.has(numa)) numas.set(numa, new Map());
      const switches = numas.get(numa);
      const sw = switchOf(position);
      if (!switches.has(sw)) switches.set(sw, []);
      switches.get(sw).push(position);
    });
    return [...numas.entries()].sort((a, b) => a[0] - b[0]);
  }

  function nvlinks(node, topology) {
    const links = topology ? topology.links : [];
    const pairs = [];
    let kind = "";
    for (let i = 0; i < node.gpus.length; i++) {
      for (let j = i + 1; j < node.gpus.length; j++) {
        const link = (links[i] || [])[j] || "";
        if (link.startsWith("NV")) {
          pairs.push([i, j]);
          kind = link;
        }
      }
    }
    const n = node.gpus.length;
    return { pairs, kind, allToAll: n > 2 && pairs.length === (n * (n - 1)) / 2 };
  }

  function holderText(holder) {
    const [tenant, workload, pod, milli, slot, reserved] = holder;
    const share = slot !== null && slot !== undefined ? `MIG slot ${slot}` : `${milli / 1000} GPU`;
    return `${tenant} · ${pod} (${share}${reserved ? ", reserved" : ""})`;
  }

  function gpuCell(gpu, x, y, s, busy, stale, size) {
    const holders = gpu.holders || [];
    const tenants = [...new Set(holders.map((h) => h[0]))];
    const parts = [];
    const title = [`GPU ${gpu.i}`];
    parts.push(`<rect class="frame" x="${x}" y="${y}" width="${s.w}" height="${s.h}" rx="3" fill="#eef0f4" stroke="#b8c0cc"/>`);
    // Holders, slices and fill stay below the number's band, so no tint or sliver reaches the
    // number: dark text on the light frame, whatever the tenant's color.
    const top = y + s.band;
    const h = s.h - s.band;
    if (gpu.mig) {
      const slots = gpu.mig.length;
      const sliceH = (h - 2) / slots;
      gpu.mig.forEach((profile, slot) => {
        const holder = holders.find((hd) => hd[4] === slot);
        const fill = holder ? GS.tenantColor(holder[0]) : "#ffffff";
        const opacity = holder ? 0.85 : 1;
        parts.push(`<rect class="slice" data-profile="${GS.esc(profile)}" data-held="${holder ? 1 : 0}" x="${x + 2}" y="${(top + slot * sliceH).toFixed(1)}" width="${s.w - 4}" height="${(sliceH - 1).toFixed(1)}" fill="${fill}" fill-opacity="${opacity}" stroke="#c9cfd9" stroke-width="0.5"/>`);
      });
      title.push(`MIG ${gpu.mig.join(", ")}`);
    } else {
      let offset = 0;
      for (const holder of holders) {
        const width = Math.max(2, (s.w * holder[3]) / 1000);
        const color = GS.tenantColor(holder[0]);
        const dash = holder[5] ? ' stroke-dasharray="3 2"' : "";
        const shown = Math.min(width, s.w - offset).toFixed(1);
        parts.push(`<rect class="share" x="${(x + offset).toFixed(1)}" y="${top}" width="${shown}" height="${h}" rx="2" fill="${color}" fill-opacity="0.28" stroke="${color}"${dash}/>`);
        if (busy !== null && busy !== undefined) {
          const level = (h * Math.min(100, busy)) / 100;
          parts.push(`<rect x="${(x + offset).toFixed(1)}" y="${(top + h - level).toFixed(1)}" width="${shown}" height="${level.toFixed(1)}" fill="${color}" fill-opacity="${stale ? 0.4 : 0.9}"/>`);
        }
        offset += width;
      }
      // A free GPU draws no fill: its latest reading may still be the previous holder's (DCGM
      // is scraped every few seconds, the release is immediate).
    }
    const shown = holders.length && busy !== null && busy !== undefined;
    const label = size === "detail" && shown ? `${gpu.i} · ${busy}%` : `${gpu.i}`;
    parts.push(`<text class="gpu-number" x="${x + s.w / 2}" y="${y + s.band - 2}" text-anchor="middle" font-size="${s.font}" font-weight="600" fill="#1d2433">${label}</text>`);
    title.push(...holders.map(holderText));
    if (!holders.length) title.push("free");
    if (shown) title.push(`DCGM busy ${busy}%${stale ? " (stale)" : ""}`);
    return `<g class="gpu" data-gpu="${gpu.i}" data-tenants="${GS.esc(tenants.join(" "))}"><title>${GS.esc(title.join("\n"))}</title>${parts.join("")}</g>`;
  }

  GS.nodeSvg = function (node, topology, telemetry, options) {
    const size = (options && options.size) || "card";
    const s = SIZES[size];
    const numas = layout(node, topology);
    const busy = (telemetry && telemetry.busy) || {};
    const stale = telemetry && telemetry.state === "stale";
    const centers = {};
    const body = [];
    let x = 0;
    const top = 0;
    // Without a reported topology every GPU counts as behind a switch of its own: nothing to name.
    const switchLabel = topology && topology.switch.length === node.gpus.length ? s.switchLabel : 0;
    const boxH = s.numaLabel + s.numaPad + switchLabel + s.pad * 2 + s.h + s.numaPad;
    for (const [numa, switches] of numas) {
      const start = x;
      let cx = x + s.numaPad;
      const inner = [];
      for (const [sw, members] of [...switches.entries()].sort((a, b) => a[1][0] - b[1][0])) {
        const width = members.length * s.w + (members.length - 1) * s.gap + s.pad * 2;
        const sy = top + s.numaLabel + s.numaPad;
        const gy = sy + switchLabel + s.pad;
        inner.push(`<rect class="switch" x="${cx}" y="${sy}" width="${width}" height="${switchLabel + s.h + s.pad * 2}" rx="4" fill="none" stroke="#9aa5b5" stroke-dasharray="${size === "detail" ? "4 3" : "2 2"}"><title>PCIe switch ${sw}: GPU ${members.map((p) => node.gpus[p].i).join(", ")}</title></rect>`);
        if (switchLabel) {
          inner.push(`<text class="switch-label" x="${cx + width / 2}" y="${sy + switchLabel - 1}" text-anchor="middle" font-size="${s.switchFont}" fill="#4a5567">PCIe ${sw}</text>`);
        }
        let gx = cx + s.pad;
        for (const position of members) {
          const gpu = node.gpus[position];
          const value = busy[String(gpu.i)];
          inner.push(gpuCell(gpu, gx, gy, s, value, stale, size));
          centers[position] = [gx + s.w / 2, gy + s.h];
          gx += s.w + s.gap;
        }
        cx += width + s.gap;
      }
      const width = cx - s.gap + s.numaPad - start;
      const label = size === "detail" ? `NUMA ${numa}${topology && topology.numa_cpus[numa] ? ` · ${topology.numa_cpus[numa]} CPUs` : ""}` : `NUMA ${numa}`;
      body.push(`<rect x="${start}" y="${top}" width="${width}" height="${boxH}" rx="6" fill="#f7f8fa" stroke="#c3c9d4"/>`);
      body.push(`<text x="${start + 6}" y="${top + s.numaLabel - 1}" font-size="${s.font}" fill="#667085">${label}</text>`);
      body.push(...inner);
      x = start + width + s.numaGap;
    }
    const width = Math.max(x - s.numaGap, 10);
    let height = boxH;
    const links = nvlinks(node, topology);
    if (links.pairs.length) {
      const y0 = boxH - s.numaPad / 2;
      const bus = boxH + s.bus * 0.55;
      const positions = Object.keys(centers).map(Number);
      if (links.allToAll) {
        const xs = positions.map((p) => centers[p][0]);
        body.push(`<path d="M${Math.min(...xs)},${bus} H${Math.max(...xs)}" stroke="#2f6fed" stroke-width="${size === "detail" ? 3 : 2}" fill="none"/>`);
        for (const p of positions) {
          body.push(`<path d="M${centers[p][0]},${centers[p][1]} V${bus}" stroke="#2f6fed" stroke-width="1" stroke-opacity="0.55"/>`);
        }
        body.push(`<text x="${width}" y="${bus + s.font + 2}" text-anchor="end" font-size="${s.font}" fill="#2f6fed">NVLink all-to-all · ${GS.esc(links.kind)}</text>`);
      } else {
        for (const [i, j] of links.pairs) {
          const [x1] = centers[i];
          const [x2] = centers[j];
          const depth = Math.min(s.bus, 6 + Math.abs(x2 - x1) / 8);
          body.push(`<path d="M${x1},${y0} C${x1},${y0 + depth} ${x2},${y0 + depth} ${x2},${y0}" stroke="#2f6fed" stroke-width="${size === "detail" ? 3 : 2}" fill="none"/>`);
        }
        body.push(`<text x="${width}" y="${boxH + s.bus * 0.55 + s.font + 2}" text-anchor="end" font-size="${s.font}" fill="#2f6fed">NVLink ${links.pairs.map(([i, j]) => `${node.gpus[i].i}-${node.gpus[j].i}`).join(" ")} · ${GS.esc(links.kind)}</text>`);
      }
      height = boxH + s.bus + s.font;
    }
    return `<svg class="topo" viewBox="-1 -1 ${width + 2} ${height + 2}" width="${width + 2}" height="${height + 2}" role="img" aria-label="Topology of ${GS.esc(node.name)}">${body.join("")}</svg>`;
  };

  /* A node's MIG slices per profile, smallest first: [{profile, total, used}] (a held slice is
   * one a holder names by its slot). */
  GS.migSlices = function (node) {
    const byProfile = new Map();
    for (const gpu of node.gpus) {
      if (!gpu.mig) continue;
      const held = new Set(gpu.holders.map((h) => h[4]).filter((slot) => slot !== null && slot !== undefined));
      gpu.mig.forEach((profile, slot) => {
        const count = byProfile.get(profile) || { profile, total: 0, used: 0 };
        count.total += 1;
        if (held.has(slot)) count.used += 1;
        byProfile.set(profile, count);
      });
    }
    const size = (profile) => parseInt(profile, 10) || 0; // "3g.40gb": 3 compute slices
    return [...byProfile.values()].sort((a, b) => size(a.profile) - size(b.profile) || a.profile.localeCompare(b.profile));
  };

  /* A bar of a node's MIG slices: one segment per profile (as wide as its share of the slices),
   * filled as far as they are used; and the same per profile in words. */
  GS.migMeter = function (slices) {
    const segments = slices.map((p) => `<span class="segment" data-profile="${GS.esc(p.profile)}" style="flex:${p.total}" title="${GS.esc(p.profile)}: ${p.used} of ${p.total} used, ${p.total - p.used} free"><span style="width:${(100 * p.used) / p.total}%"></span></span>`);
    return `<span class="meter mig-meter">${segments.join("")}</span>`;
  };

  GS.migText = function (slices) {
    return slices.map((p) => `<span class="mig-profile" data-profile="${GS.esc(p.profile)}">${GS.esc(p.profile)} <strong>${p.used}</strong>/${p.total}</span>`).join(" · ");
  };

  GS.shortModel = function (model) {
    return String(model || "").replace(/^NVIDIA[- ]/, "");
  };
})();
