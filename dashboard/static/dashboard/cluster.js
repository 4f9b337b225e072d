/* Cluster page: totals, the tenant legend and one card per node, kept live; where the nodes carry
 * a Topology's levels, the cards are grouped by its domains (block > rack > node), each headed by
 * its free GPUs (state.domains, one selector: dashboard/selectors/cluster.py domain_free_gpus). */
(function () {
  "use strict";

  const socket = document.currentScript.dataset.socket;
  const grid = document.getElementById("nodes");
  const stats = document.getElementById("stats");
  const legend = document.getElementById("legend");
  const filter = document.getElementById("filter");
  const cards = new Map();
  let query = "";
  let current = null;

  // A big cluster draws each node's topology only once its card comes near the viewport: a
  // thousand cards appear at once, a thousand diagrams (~100 SVG elements each) do not need to.
  const EAGER = 200;
  const near = new Set();
  const observer = new IntersectionObserver(
    (entries) => {
      for (const entry of entries) {
        const name = entry.target.dataset.node;
        if (entry.isIntersecting) {
          near.add(name);
          if (entry.target.dataset.drawn !== "1" && current) renderNodes(current, [name]);
        } else {
          near.delete(name);
        }
      }
    },
    { rootMargin: "600px 0px" },
  );

  function pct(used, total) {
    return total ? Math.round((100 * used) / total) : 0;
  }

  function meter(label, used, total, text) {
    const width = Math.min(100, pct(used, total));
    return `<span>${label}</span><span class="meter"><span style="width:${width}%"></span></span><span>${text}</span>`;
  }

  function badges(node, telemetry) {
    const out = [];
    if (node.cordoned) out.push('<span class="badge bad">cordoned</span>');
    if (node.source === "kubernetes") out.push('<span class="badge muted">k8s</span>');
    if (!telemetry) {
      out.push('<span class="badge muted" title="No DCGM reading for this node yet">no metrics</span>');
    } else if (telemetry.state !== "fresh") {
      const age = telemetry.at ? GS.ago(telemetry.at) : "never";
      out.push(`<span class="badge warn" title="Last DCGM reading ${age}: the scheduler scores this node's load as neutral">stale · ${age}</span>`);
    }
    return out.join("");
  }

  function tenantsOf(node) {
    const names = new Set();
    for (const gpu of node.gpus) for (const holder of gpu.holders) names.add(holder[0]);
    return [...names];
  }

  function drawn(name, state) {
    return Object.keys(state.nodes || {}).length <= EAGER || near.has(name);
  }

  function levelsOf(state) {
    return ((state.levels || {}).all || { labels: [], nouns: [] });
  }

  function domainKey(node, state) {
    return levelsOf(state).labels.length && node.domain ? node.domain.join("/") : "";
  }

  function cardHtml(node, state) {
    const topology = node.topology ? state.topologies[node.topology] : null;
    const telemetry = (state.telemetry || {})[node.name];
    const whole = node.gpus.filter((gpu) => !gpu.mig);
    const used = whole.reduce((sum, gpu) => sum + gpu.used, 0) / 1000;
    const slices = GS.migSlices(node);
    // A MIG GPU is counted by its slices (their own row), a whole GPU by what its holders take.
    let gpuMeters = whole.length || !slices.length ? meter("GPU", used, whole.length || 1, `${GS.gpus(used)}/${whole.length}`) : "";
    if (slices.length) {
      const usedSlices = slices.reduce((sum, p) => sum + p.used, 0);
      const allSlices = slices.reduce((sum, p) => sum + p.total, 0);
      const migGpus = node.gpus.length - whole.length;
      gpuMeters += `<span title="${migGpus} MIG GPU${migGpus === 1 ? "" : "s"}">MIG</span>${GS.migMeter(slices)}<span>${usedSlices}/${allSlices}</span>
        <span class="mig-profiles">${GS.migText(slices)} <span class="note">slices used</span></span>`;
    }
    const classes = ["node-card"];
    if (node.cordoned) classes.push("cordoned");
    const search = `${node.name} ${node.model} ${tenantsOf(node).join(" ")}`.toLowerCase();
    const hidden = query && !search.includes(query) ? " hidden" : "";
    const draw = drawn(node.name, state);
    const diagram = draw ? GS.nodeSvg(node, topology, telemetry, { size: "card" }) : '<div class="topo-placeholder"></div>';
    return `<article class="${classes.join(" ")}${hidden}" data-node="${GS.esc(node.name)}" data-domain="${GS.esc(domainKey(node, state))}" data-search="${GS.esc(search)}" data-drawn="${draw ? 1 : 0}">
      <header><a href="/nodes/${encodeURIComponent(node.name)}/">${GS.esc(node.name)}</a>
        <span class="model" title="${GS.esc(node.model)}">${GS.esc(GS.shortModel(node.model))}</span>
        <span class="badges">${badges(node, telemetry)}</span></header>
      ${diagram}
      <div class="meters">${gpuMeters}${meter("CPU", node.cpu[0], node.cpu[1], `${pct(node.cpu[0], node.cpu[1])}%`)}${meter("Mem", node.memory[0], node.memory[1], `${pct(node.memory[0], node.memory[1])}%`)}</div>
    </article>`;
  }

  function element(html) {
    const template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  function freeText(doc) {
    return `${doc.free} free GPU${doc.free === 1 ? "" : "s"}`;
  }

  // The domains' sections, widest level first, each holding its narrower ones or (at the last
  // level) its nodes' cards; nodes without the levels' labels go last, outside the topology.
  function groupedHtml(state, names) {
    const { nouns } = levelsOf(state);
    const tree = new Map();
    const outside = [];
    for (const name of names) {
      const path = state.nodes[name].domain;
      if (!path) {
        outside.push(name);
        continue;
      }
      let level = tree;
      path.forEach((value, depth) => {
        if (!level.has(value)) level.set(value, depth === path.length - 1 ? [] : new Map());
        level = level.get(value);
      });
      level.push(name);
    }
    const cardsOf = (list) => `<div class="nodes">${list.map((name) => cardHtml(state.nodes[name], state)).join("")}</div>`;
    const section = (level, prefix, depth) => [...level.keys()].sort().map((value) => {
      const key = prefix ? `${prefix}/${value}` : value;
      const inner = level.get(value);
      return `<section class="domain depth-${depth}" data-domain="${GS.esc(key)}" aria-label="${GS.esc(`${nouns[depth]} ${value}`)}">
        <h2 class="domain-head"><span class="level">${GS.esc(nouns[depth])}</span> ${GS.esc(value)}
          <span class="domain-free" data-free-of="${GS.esc(key)}"></span></h2>
        ${Array.isArray(inner) ? cardsOf(inner) : section(inner, key, depth + 1)}</section>`;
    }).join("");
    const rest = outside.length ? `<section class="domain outside" data-domain=""><h2 class="domain-head">Outside the topology <span class="note">(without its levels' labels)</span></h2>${cardsOf(outside)}</section>` : "";
    return section(tree, "", 0) + rest;
  }

  function renderDomains(state) {
    const domains = state.domains || {};
    for (const head of grid.querySelectorAll(".domain-free")) {
      const doc = domains[head.dataset.freeOf];
      head.textContent = doc ? `${freeText(doc)} · ${doc.nodes} node${doc.nodes === 1 ? "" : "s"}, ${doc.gpus} GPUs` : "";
    }
  }

  function renderAll(state) {
    const names = Object.keys(state.nodes || {}).sort();
    if (!names.length) {
      grid.innerHTML = '<div class="empty"><strong>No nodes yet.</strong>Nodes appear here as soon as they register (the simulator or the Kubernetes informer).</div>';
      cards.clear();
      return;
    }
    observer.disconnect();
    const grouped = levelsOf(state).labels.length > 0;
    grid.classList.toggle("grouped", grouped);
    grid.innerHTML = grouped ? groupedHtml(state, names) : names.map((name) => cardHtml(state.nodes[name], state)).join("");
    cards.clear();
    for (const card of grid.querySelectorAll("article.node-card")) {
      cards.set(card.dataset.node, card);
      observer.observe(card);
    }
    renderDomains(state);
  }

  function renderNodes(state, names) {
    // Grouped, a node that comes, goes or moves to another domain redraws the groups.
    if (levelsOf(state).labels.length) {
      for (const name of names) {
        const node = (state.nodes || {})[name];
        const old = cards.get(name);
        if (!node || !old || old.dataset.domain !== domainKey(node, state)) {
          renderAll(state);
          return;
        }
      }
    }
    for (const name of names) {
      const node = (state.nodes || {})[name];
      const old = cards.get(name);
      if (!node) {
        if (old) {
          observer.unobserve(old);
          old.remove();
        }
        cards.delete(name);
        continue;
      }
      const card = element(cardHtml(node, state));
      observer.observe(card);
      if (old) {
        observer.unobserve(old);
        old.replaceWith(card);
      } else {
        const next = [...cards.keys()].sort().find((other) => other > name);
        grid.insertBefore(card, next ? cards.get(next) : null);
        if (grid.querySelector(".empty")) grid.querySelector(".empty").remove();
      }
      cards.set(name, card);
    }
  }

  function renderStats(state) {
    const summary = (state.summary || {}).all;
    if (!summary) return;
    const telemetry = state.telemetry || {};
    const nodes = Object.keys(state.nodes || {});
    const stale = nodes.filter((name) => telemetry[name] && telemetry[name].state !== "fresh").length;
    const missing = nodes.filter((name) => !telemetry[name]).length;
    // Sampled a moment after the page's first data (it reads the scheduler's whole snapshot).
    const judged = (state.stranded || {}).all;
    const stranded = judged ? judged.stranded : "…";
    let strandedHint = "being judged";
    if (judged && judged.pending_shapes && judged.stranded) {
      strandedHint = `free on ${judged.stranded_nodes} node(s) where no waiting pod fits (taints, node selectors, topology, fragmentation, CPU/memory left)`;
    } else if (judged && judged.pending_shapes) {
      strandedHint = "every free GPU fits some waiting pod";
    } else if (judged) {
      strandedHint = "nothing is waiting for GPUs";
    }
    stats.innerHTML = `
      <div class="stat"><div class="label">Nodes</div><div class="value">${summary.nodes}</div><div class="hint">${summary.cordoned} cordoned</div></div>
      <div class="stat"><div class="label">GPUs in use</div><div class="value">${GS.gpus(summary.in_use)}</div><div class="hint">of ${summary.gpus - summary.mig_gpus} whole GPUs${summary.mig_gpus ? ` (+${summary.mig_gpus} MIG)` : ""}</div></div>
      <div class="stat"><div class="label">Free GPUs</div><div class="value">${summary.free}</div><div class="hint">on schedulable nodes${summary.cordoned_free ? `; ${summary.cordoned_free} more cordoned` : ""}</div></div>
      <div class="stat${judged && judged.stranded ? " warn" : ""}" id="stranded"><div class="label">Stranded GPUs</div><div class="value">${stranded}</div><div class="hint">${strandedHint}</div></div>
      <div class="stat"><div class="label">Telemetry</div><div class="value">${nodes.length - stale - missing}<span class="hint"> fresh</span></div><div class="hint">${stale} stale · ${missing} without metrics</div></div>`;
  }

  function renderLegend(state) {
    const names = new Set();
    for (const node of Object.values(state.nodes || {})) tenantsOf(node).forEach((name) => names.add(name));
    const chips = [...names].sort().map(GS.chip).join("");
    legend.innerHTML = `${chips || '<span>No GPU is held right now.</span>'}
      <span><span class="swatch" style="background:#eef0f4;border:1px solid #b8c0cc"></span>free</span>
      <span><span class="swatch" style="background:linear-gradient(to top,#4e79a7 60%,rgba(78,121,167,.28) 60%)"></span>fill = DCGM busy</span>
      <span><span class="swatch" style="border:1px dashed #4e79a7"></span>reserved</span>`;
  }

  /* Telemetry sources that are failing (a scrape target down, Prometheus unreachable), or that
   * answer but had series left out (a cap on series or nodes reached, series naming no node of
   * the cluster): what the ingester's /metrics counts, said on the page. Nothing is shown while
   * every source is fine. */
  const sources = document.getElementById("sources");
  function renderSources(state) {
    const all = Object.values(state.sources || {}).sort((a, b) => a.name.localeCompare(b.name));
    const failing = all.filter((s) => !s.ok).map((s) => `<div class="refused" role="alert"><span class="badge warn">Telemetry source failing</span>
      <strong>${GS.esc(s.name)}</strong>: ${s.failures} attempt${s.failures === 1 ? "" : "s"} in a row failed (last good ${s.last_success ? GS.ago(s.last_success) : "never"}).
      <span class="reason">${GS.esc(s.error)}</span><div class="note">Busy fills go stale until it answers again; scheduling goes on without them.</div></div>`);
    const partial = all.filter((s) => s.ok && s.warning).map((s) => `<div class="refused" role="status"><span class="badge warn">Telemetry source left series out</span>
      <strong>${GS.esc(s.name)}</strong>: <span class="reason">${GS.esc(s.warning)}</span></div>`);
    sources.innerHTML = failing.concat(partial).join("");
  }

  function render(state, touched) {
    current = state;
    if (!touched || touched.sources) renderSources(state);
    if (!touched || touched.topologies || touched.levels) {
      renderAll(state);
    } else {
      const names = new Set([...(touched.nodes || []), ...(touched.telemetry || [])]);
      renderNodes(state, names);
      if (touched.nodes) for (const name of touched.nodes) GS.flash(cards.get(name));
      if (touched.domains) renderDomains(state);
    }
    renderStats(state);
    if (!touched || touched.nodes) renderLegend(state);
  }

  filter.addEventListener("input", () => {
    query = filter.value.trim().toLowerCase();
    for (const card of cards.values()) {
      card.classList.toggle("hidden", Boolean(query) && !card.dataset.search.includes(query));
    }
  });

  GS.live(socket, render);
})();
