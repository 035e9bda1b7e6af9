// The journal viewer's script: keyboard navigation, the live tail (server-sent
// events) and the keys help. It builds every node from text (textContent), never
// from markup, so stored content stays inert here too.
"use strict";
(function () {
  const ROWS =
    "table.nav-rows > tbody > tr, .convo > article.msg-item, ul.tree li > .node-line";

  function rows() {
    return Array.from(document.querySelectorAll(ROWS));
  }
  function current() {
    return document.querySelector(".sel");
  }
  function select(el) {
    if (!el) return;
    const old = current();
    if (old) {
      old.classList.remove("sel");
      old.removeAttribute("aria-selected");
    }
    el.classList.add("sel");
    el.setAttribute("aria-selected", "true");
    if (!el.hasAttribute("tabindex")) el.setAttribute("tabindex", "-1");
    el.focus({ preventScroll: true });
    el.scrollIntoView({ block: "nearest" });
  }
  function move(step) {
    const all = rows();
    if (!all.length) return;
    const at = all.indexOf(current());
    const next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, at + step));
    select(all[next]);
  }
  function open(el) {
    if (!el) return;
    // a message's own raw JSON (not its tool result's), else the row's
    const raw = el.querySelector(":scope > details.raw") || el.querySelector("details.raw");
    if (raw) {
      raw.open = !raw.open;
      return;
    }
    const link = el.querySelector("a[href]");
    if (link) link.click();
  }
  function clickLink(sel) {
    const link = document.querySelector(sel);
    if (link) {
      link.click();
      return true;
    }
    return false;
  }

  // ------------------------------------------------------------------ help
  function help() {
    let box = document.getElementById("keys-help");
    if (box) {
      box.hidden = !box.hidden;
      return;
    }
    box = document.createElement("div");
    box.id = "keys-help";
    box.setAttribute("role", "dialog");
    box.setAttribute("aria-label", "keyboard shortcuts");
    const keys = [
      ["j / ↓", "next row"],
      ["k / ↑", "previous row"],
      ["Enter / o", "open the row (raw JSON, or its link)"],
      ["g / G", "first / last row"],
      ["n", "older page"],
      ["p", "newer page (back)"],
      ["/", "filter or search"],
      ["f", "follow live (timeline)"],
      ["?", "this help"],
      ["Esc", "close"],
    ];
    const h = document.createElement("h2");
    h.textContent = "Keys";
    box.appendChild(h);
    const dl = document.createElement("dl");
    for (const [k, v] of keys) {
      const dt = document.createElement("dt");
      const kbd = document.createElement("kbd");
      kbd.textContent = k;
      dt.appendChild(kbd);
      const dd = document.createElement("dd");
      dd.textContent = v;
      dl.append(dt, dd);
    }
    box.appendChild(dl);
    document.body.appendChild(box);
  }

  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const t = ev.target;
    const typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT");
    if (typing) {
      if (ev.key === "Escape") t.blur();
      return;
    }
    switch (ev.key) {
      case "j":
      case "ArrowDown":
        move(1);
        break;
      case "k":
      case "ArrowUp":
        move(-1);
        break;
      case "g":
        select(rows()[0]);
        break;
      case "G":
        select(rows()[rows().length - 1]);
        break;
      case "Enter":
      case "o":
        if (t && t.tagName === "A") return; // a focused link opens itself
        if (t && t.tagName === "SUMMARY") return;
        open(current());
        break;
      case "n":
        clickLink('[data-page="next"]');
        break;
      case "p":
        if (!clickLink('[data-page="prev"]')) history.back();
        break;
      case "/": {
        const f = document.querySelector("[data-filter]");
        if (f) f.focus();
        break;
      }
      case "f": {
        const b = document.querySelector("[data-follow]");
        if (b) b.click();
        break;
      }
      case "?":
        help();
        break;
      case "Escape": {
        const box = document.getElementById("keys-help");
        if (box) box.hidden = true;
        break;
      }
      default:
        return;
    }
    ev.preventDefault();
  });
  document.addEventListener("click", function (ev) {
    const helpLink = ev.target.closest && ev.target.closest("[data-help]");
    if (helpLink) {
      ev.preventDefault();
      help();
      return;
    }
    const row = ev.target.closest && ev.target.closest(ROWS);
    if (row) select(row);
  });

  // ------------------------------------------------------------------ live tail
  function when(ms) {
    return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
  }
  function detail(msg) {
    const rest = Object.assign({}, msg);
    delete rest.type;
    delete rest.session_id;
    for (const k of ["text", "delta", "message"]) {
      if (typeof rest[k] === "string") return rest[k];
    }
    return JSON.stringify(rest);
  }
  function clip(s, n) {
    s = s.split(/\s+/).join(" ");
    return s.length <= n ? s : s.slice(0, n - 1) + "…";
  }
  function eventRow(e) {
    const tr = document.createElement("tr");
    tr.className = "ev fresh";
    tr.tabIndex = 0;
    tr.dataset.seq = String(e.sequence);
    const msg = (e.event && e.event.msg) || {};
    const cells = [String(e.sequence), when(e.recorded_at_ms), null, null];
    cells.forEach(function (text, i) {
      const td = document.createElement("td");
      if (i === 0) td.className = "num";
      if (i === 1) td.className = "nowrap";
      if (i === 2) {
        const span = document.createElement("span");
        span.className = "type";
        span.textContent = String(msg.type || "?");
        td.appendChild(span);
      } else if (i === 3) {
        td.className = "detail";
        const span = document.createElement("span");
        span.className = "msg";
        span.textContent = clip(detail(msg), 200);
        const det = document.createElement("details");
        det.className = "raw";
        const sum = document.createElement("summary");
        sum.textContent = "raw JSON";
        const pre = document.createElement("pre");
        pre.className = "json";
        pre.textContent = JSON.stringify(e, null, 2);
        det.append(sum, pre);
        td.append(span, det);
      } else {
        td.textContent = text;
      }
      tr.appendChild(td);
    });
    return tr;
  }

  const follow = document.querySelector("[data-follow]");
  const table = document.querySelector("table[data-live]");
  if (follow && table) {
    const status = document.querySelector(".live-status");
    const body = table.tBodies[0];
    let source = null;
    let count = 0;
    function say(text) {
      if (status) status.textContent = text;
    }
    function stop() {
      if (source) source.close();
      source = null;
      follow.setAttribute("aria-pressed", "false");
      follow.textContent = "Follow live";
      document.body.classList.remove("following");
      say(count ? count + " new events (stopped)" : "stopped");
    }
    function start() {
      source = new EventSource(table.dataset.live);
      follow.setAttribute("aria-pressed", "true");
      follow.textContent = "Stop";
      document.body.classList.add("following");
      say("following: waiting for new commits…");
      source.addEventListener("events", function (m) {
        const events = JSON.parse(m.data);
        for (const e of events) {
          body.insertBefore(eventRow(e), body.firstChild);
          count += 1;
        }
        say("following: " + count + " new events, last " + (m.lastEventId || "?"));
      });
      source.onerror = function () {
        say("following: connection lost, retrying…");
      };
    }
    follow.addEventListener("click", function () {
      if (source) stop();
      else start();
    });
    if (new URLSearchParams(location.search).get("live") === "1") start();
  }
})();
