/* gpusched live views: the websocket protocol and helpers shared by every page.
 *
 * A page calls GS.live(path, onUpdate). The server sends
 *   {type: "snapshot", epoch, id, state}               the whole state of the view
 *   {type: "delta", epoch, from, id, changes, events}  what changed after outbox event `id`
 *   {type: "sample", changes}                          telemetry parts, re-read periodically
 * where state is {slice: {key: doc}} and changes is {slice: {set?, del?, replace?}}: the same rule
 * as dashboard/live.py `apply`. After a drop the socket reconnects with ?since=<id>&epoch=<epoch>
 * and gets only the deltas it missed (or a fresh snapshot when it is too far behind).
 * A message too large for one websocket frame (a 5,000-node snapshot) comes as {..., parts: N}
 * followed by N - 1 {type: "part", n, state | changes} frames (dashboard/frames.py): they are
 * merged, and the whole message handled once.
 */
(function () {
  "use strict";

  const GS = (window.GS = window.GS || {});

  GS.applyChanges = function (state, changes) {
    const touched = {};
    for (const [name, change] of Object.entries(changes)) {
      if (change.replace) state[name] = Object.assign({}, change.replace);
      const part = (state[name] = state[name] || {});
      const keys = new Set(change.replace ? Object.keys(change.replace) : []);
      for (const key of change.del || []) {
        delete part[key];
        keys.add(key);
      }
      for (const [key, doc] of Object.entries(change.set || {})) {
        part[key] = doc;
        keys.add(key);
      }
      touched[name] = keys;
    }
    return touched;
  };

  /* Merge one part of a message into what came before (dashboard/frames.py `merge_into`). */
  GS.joinPart = function (into, part) {
    for (const [key, value] of Object.entries(part)) {
      const have = into[key];
      if (Array.isArray(value) && Array.isArray(have)) have.push(...value);
      else if (value && typeof value === "object" && !Array.isArray(value) &&
               have && typeof have === "object" && !Array.isArray(have)) GS.joinPart(have, value);
      else into[key] = value;
    }
    return into;
  };

  GS.live = function (path, onUpdate) {
    const status = document.getElementById("live-status");
    const view = { state: {}, id: null, epoch: null, socket: null, messages: 0 };
    let retry = 0;
    let pending = null; // changes gathered until the next animation frame
    let partial = null; // a message whose parts are still arriving
    let fullRender = false;

    function setStatus(state, text) {
      if (!status) return;
      status.dataset.state = state;
      status.textContent = text;
    }

    function flush() {
      const touched = pending;
      const full = fullRender;
      pending = null;
      fullRender = false;
      onUpdate(view.state, full ? null : touched);
      document.body.dataset.liveId = String(view.id);
      if (full && !performance.getEntriesByName("live-render").length) performance.mark("live-render");
    }

    function schedule(touched, full) {
      if (full) fullRender = true;
      if (touched) {
        pending = pending || {};
        for (const [name, keys] of Object.entries(touched)) {
          pending[name] = pending[name] || new Set();
          keys.forEach((key) => pending[name].add(key));
        }
      }
      if (!schedule.queued) {
        schedule.queued = true;
        requestAnimationFrame(() => {
          schedule.queued = false;
          flush();
        });
      }
    }

    function connect() {
      const proto = location.protocol === "https:" ? "wss:" : "ws:";
      let url = `${proto}//${location.host}/${path}`;
      if (view.id !== null && view.epoch) {
        url += `?since=${view.id}&epoch=${encodeURIComponent(view.epoch)}`;
      }
      const socket = (view.socket = new WebSocket(url));
      socket.onopen = () => {
        retry = 0;
        setStatus("live", "live");
      };
      socket.onmessage = (event) => {
        if (event.data === "pong") return;
        if (!view.messages && !partial) performance.mark("live-message");
        let message = JSON.parse(event.data);
        if (message.type === "part") {
          if (!partial) return; // the rest of a message begun on an earlier socket
          const field = partial.state ? "state" : "changes";
          GS.joinPart(partial[field], message[field]);
          if (message.n < partial.parts - 1) return;
          message = partial;
          partial = null;
        } else if (message.parts > 1) {
          partial = message;
          return;
        }
        view.messages += 1;
        if (message.type === "snapshot") {
          if (view.messages === 1) performance.mark("live-snapshot");
          view.state = message.state;
          view.id = message.id;
          view.epoch = message.epoch;
          schedule(null, true);
        } else if (message.type === "delta") {
          view.id = message.id;
          schedule(GS.applyChanges(view.state, message.changes), false);
        } else if (message.type === "sample") {
          schedule(GS.applyChanges(view.state, message.changes), false);
        }
        setStatus("live", `live · #${view.id}`);
      };
      socket.onclose = (event) => {
        partial = null;
        if (event.code === 4401) {
          setStatus("closed", "signed out");
          return;
        }
        retry += 1;
        const delay = Math.min(10000, 400 * 2 ** Math.min(retry, 5)) * (0.75 + Math.random() / 2);
        setStatus("reconnecting", "reconnecting…");
        setTimeout(connect, delay);
      };
    }

    connect();
    GS.view = view;
    return view;
  };

  /* --- formatting --------------------------------------------------------------------------- */

  const PALETTE = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1",
    "#76b7b2", "#edc948", "#9c755f", "#ff9da7", "#6b8e23",
  ];
  const order = JSON.parse((document.getElementById("tenant-order") || {}).textContent || "[]");

  GS.tenantColor = function (name) {
    let index = order.indexOf(name);
    if (index < 0) {
      index = 0;
      for (const ch of name) index = (index * 31 + ch.charCodeAt(0)) >>> 0;
    }
    return PALETTE[index % PALETTE.length];
  };

  GS.esc = function (value) {
    return String(value ?? "").replace(/[&<>"']/g, (c) => ({
      "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
    })[c]);
  };

  GS.chip = function (tenant) {
    return `<span class="chip" style="--chip:${GS.tenantColor(tenant)}">${GS.esc(tenant)}</span>`;
  };

  GS.ago = function (value) {
    if (value === null || value === undefined) return "—";
    const when = typeof value === "number" ? value * 1000 : Date.parse(value);
    const seconds = Math.max(0, Math.round((Date.now() - when) / 1000));
    if (seconds < 60) return `${seconds}s ago`;
    if (seconds < 3600) return `${Math.round(seconds / 60)}m ago`;
    if (seconds < 86400) return `${Math.round(seconds / 3600)}h ago`;
    return `${Math.round(seconds / 86400)}d ago`;
  };

  GS.until = function (iso) {
    const seconds = Math.round((Date.parse(iso) - Date.now()) / 1000);
    if (seconds <= 5) return "now";
    if (seconds < 3600) return `in ${Math.max(1, Math.round(seconds / 60))}m`;
    if (seconds < 86400) return `in ${(seconds / 3600).toFixed(1)}h`;
    return `in ${Math.round(seconds / 86400)}d`;
  };

  /* Wall-clock times with their date and zone (the simulator runs on the wall clock too: only its
   * workloads' durations are compressed, see the banner). `value`: ISO text or epoch seconds. */
  function toDate(value) {
    return new Date(typeof value === "number" ? value * 1000 : value);
  }

  GS.time = function (value) {
    if (value === null || value === undefined || value === "") return "—";
    return toDate(value).toLocaleString([], {
      year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false, timeZoneName: "short",
    });
  };

  GS.clock = function (value) {
    if (value === null || value === undefined) return "—";
    return toDate(value).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
  };

  GS.zone = function () {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
  };

  GS.gpus = function (value) {
    return Number(value || 0).toLocaleString(undefined, { maximumFractionDigits: 2 });
  };

  /* Why a pod waits (scheduling/selectors/why_pending.py): what would make it fit, and each group of
   * nodes under the first filter they failed, with a few of them by name. */
  GS.whyPending = function (why) {
    const groups = why.groups.map((g) => {
      const names = g.examples.map((n) => `<a href="/nodes/${encodeURIComponent(n)}/">${GS.esc(n)}</a>`).join(", ");
      const more = g.nodes > g.examples.length ? ` and ${g.nodes - g.examples.length} more` : "";
      const kind = g.unresolvable ? '<span class="badge bad" title="No pod finishing or preempted makes these nodes fit">fixed</span>' : `<span class="badge warn" title="Pods finishing or preempted can make room on ${g.resolvable} of these nodes">load: ${g.resolvable}</span>`;
      return `<tr><td class="num">${g.nodes}</td><td>${GS.esc(g.plugin)}</td><td>${kind} <span class="reason">${GS.esc(g.reason)}</span><div class="note">${names}${more}</div></td></tr>`;
    });
    const filters = why.failed_by_plugin.map(([p, n]) => `${GS.esc(p)} ${n}`).join(" · ");
    return `<div class="why" id="why-pending"><h3 style="margin-top:1rem">Why it waits</h3>
      <p class="would-fit"><strong>${GS.esc(why.would_fit)}</strong></p>
      <table class="grid"><thead><tr><th class="num">Nodes</th><th>First failed filter</th><th>Reason, nodes</th></tr></thead><tbody>${groups.join("")}</tbody></table>
      <p class="note">${why.feasible} of ${why.nodes} nodes pass every filter. Rejections per filter (a node may fail several): ${filters || "none"}.</p></div>`;
  };

  /* Admin actions are plain POST forms; those with data-confirm ask first. The question may
   * quote the form's fields: "{quantity}" is what the admin typed in the field named quantity. */
  document.addEventListener("submit", (event) => {
    const form = event.target.closest("form[data-confirm]");
    if (!form) return;
    const question = form.dataset.confirm.replace(/\{(\w+)\}/g, (text, name) => (form.elements[name] ? form.elements[name].value : text));
    if (!window.confirm(question)) event.preventDefault();
  });

  /* The hidden fields of a POST form built in the browser: the CSRF token (from the page's meta)
   * and where to come back to. */
  GS.formHidden = function () {
    const token = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
    const next = location.pathname + location.search;
    return `<input type="hidden" name="csrfmiddlewaretoken" value="${GS.esc(token)}"><input type="hidden" name="next" value="${GS.esc(next)}">`;
  };

  /* A POST form for an action row built in the browser. */
  GS.actionForm = function (action, label, confirmText, extraClass) {
    return `<form method="post" action="${GS.esc(action)}" data-confirm="${GS.esc(confirmText)}" class="inline">${GS.formHidden()}<button type="submit" class="${extraClass || ""}">${GS.esc(label)}</button></form>`;
  };

  GS.flash = function (element) {
    if (!element) return;
    element.classList.remove("flash");
    void element.offsetWidth; // restart the animation
    element.classList.add("flash");
  };
})();
