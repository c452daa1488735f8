/* orchestrator dashboard: live parts of the server-rendered pages. Part of orchestrator (MIT licence, see
   LICENSE in this folder). No framework, no build step: the server renders, this only refreshes and acts. */
(function () {
  "use strict";
  var conn = document.getElementById("conn");
  var page = document.body.getAttribute("data-page");

  function say(text, cls) {
    if (!conn) return;
    conn.textContent = text;
    conn.className = "conn " + (cls || "");
  }

  // a URL with #token=... is traded for the session cookie, then the fragment is dropped from the address bar
  function takeToken() {
    var m = /[#&]token=([^&]+)/.exec(location.hash);
    if (!m) return false;
    fetch("/api/v1/session", { method: "POST", headers: { Authorization: "Bearer " + decodeURIComponent(m[1]) } })
      .then(function (r) {
        history.replaceState(null, "", location.pathname + location.search);
        if (r.ok) location.reload();
        else say("the token in this URL is not this start's: run `orchestrator web`", "down");
      });
    return true;
  }
  window.addEventListener("hashchange", takeToken);
  if (takeToken() || page === "login") return;

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body || {}),
      credentials: "same-origin",
    }).then(function (r) {
      return r.json().then(function (data) {
        if (!r.ok) throw new Error((data.error && data.error.message) || r.statusText);
        return data;
      });
    });
  }

  // ---------------------------------------------------------------- the events stream, with reconnects
  var refreshTimer = null;
  function refresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(function () {
      refreshTimer = null;
      var live = document.getElementById("live");
      if (!live) return;
      if (live.querySelector("form.answer input:focus")) return; // a person is typing an answer: keep it
      fetch("/fragments/overview", { credentials: "same-origin" }).then(function (r) {
        if (r.ok) return r.text().then(function (html) { live.innerHTML = html; });
      });
    }, 100);
  }
  var lost = false;
  var startedAt = null;
  function connect() {
    var source = new EventSource("/api/v1/events");
    source.addEventListener("hello", function (ev) {
      var hello = JSON.parse(ev.data);
      if (lost) {
        var again = startedAt && startedAt !== hello.started_at;
        say(again ? "the orchestrator restarted; reconnected" : "reconnected", "up");
        refresh();
        lost = false;
      } else {
        say("live", "up");
      }
      startedAt = hello.started_at;
    });
    ["run", "holds", "paused", "queued", "ending", "budget_blocks", "notice"].forEach(function (kind) {
      source.addEventListener(kind, function (ev) {
        if (page === "/") refresh();
        if (kind === "run") runChanged(JSON.parse(ev.data).run);
      });
    });
    source.onerror = function () {
      if (!lost) say("the orchestrator is not answering; reconnecting…", "down");
      lost = true;
      // the browser reconnects by itself while the server is away; an answer other than the stream (a 401 after a
      // restart: the session was this start's) closes it for good, so ask why
      if (source.readyState === EventSource.CLOSED) {
        fetch("/api/v1/state", { credentials: "same-origin" }).then(function (r) {
          if (r.status !== 401) return setTimeout(connect, 1000);
          say("this page's session has ended (a restart ends it): open the URL `orchestrator web` prints", "down");
        }, function () { setTimeout(connect, 1000); });
      }
    };
  }
  connect();

  // ---------------------------------------------------------------- the run page
  var actions = document.getElementById("actions");
  var status = document.getElementById("action-status");
  var runId = actions ? actions.getAttribute("data-run") : null;

  function runChanged(run) {
    if (!runId || String(run.run_id) !== runId) return;
    var badge = document.getElementById("run-state");
    if (badge) {
      badge.textContent = run.state;
      badge.className = "badge state-" + run.state;
    }
  }

  function showReceipt(data) {
    var pre = document.getElementById("receipt");
    if (!pre) return;
    pre.hidden = false;
    pre.textContent = JSON.stringify(data, null, 2);
  }

  if (actions) {
    actions.addEventListener("click", function (ev) {
      var button = ev.target.closest("button[data-action]");
      if (!button) return;
      var action = button.getAttribute("data-action");
      var doing = {
        cancel: "stopping…",
        interrupt: "interrupting…",
        retry: "moving it back to the inbox…",
        land: "landing its workspace (waiting for its turn, the rebase and the check)…"
      };
      actions.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
      status.textContent = doing[action] || "…";
      status.className = "pending";
      var sent = action === "land"
        ? post("/api/v1/requests/land", { target: button.getAttribute("data-target") })
        : post("/api/v1/runs/" + runId + "/" + action, {});
      sent.then(function (data) {
        status.textContent = action === "retry" ? "back in its inbox: it runs again" : action + " done";
        status.className = "done";
        if (action === "land") {
          status.textContent = data.landed ? data.reason : "not landed: " + data.reason;
          status.className = data.landed ? "done" : "error";
          actions.querySelectorAll("button").forEach(function (b) { b.disabled = false; });
        }
        showReceipt(data);
        var badge = document.getElementById("run-state");
        if (badge && data.state) { badge.textContent = data.state; badge.className = "badge state-" + data.state; }
      }).catch(function (err) {
        status.textContent = "refused: " + err.message;
        status.className = "error";
        actions.querySelectorAll("button").forEach(function (b) { b.disabled = false; });
      });
    });
    var tell = document.getElementById("tell");
    if (tell) {
      tell.addEventListener("submit", function (ev) {
        ev.preventDefault();
        var text = tell.elements.text.value;
        status.textContent = "telling…";
        post("/api/v1/runs/" + runId + "/tell", { text: text }).then(function () {
          status.textContent = "told";
          status.className = "done";
          tell.elements.text.value = "";
        }).catch(function (err) {
          status.textContent = "refused: " + err.message;
          status.className = "error";
        });
      });
    }
  }

  // ---------------------------------------------------------------- an answer box: what `orchestrator answer` sends
  document.addEventListener("submit", function (ev) {
    var form = ev.target.closest("form.answer");
    if (!form) return;
    ev.preventDefault();
    var which = ev.submitter ? ev.submitter.value : "answer";
    var body = which === "allow" ? { allow: true } : which === "deny" ? { deny: true, note: form.elements.note.value || null }
      : { text: form.elements.text.value };
    var said = form.querySelector(".answer-status");
    said.textContent = "…";
    body.memo = form.getAttribute("data-memo");
    post("/api/v1/requests/answer", body).then(function (data) {
      said.textContent = (data.decision === "deny" ? "denied" : "answered") + ": queued to run again";
      form.querySelectorAll("button, input").forEach(function (b) { b.disabled = true; });
    }).catch(function (err) { said.textContent = "refused: " + err.message; });
  });

  document.addEventListener("click", function (ev) {
    var button = ev.target.closest("button[data-wake]");
    if (!button) return;
    var role = button.getAttribute("data-wake");
    post("/api/v1/roles/" + encodeURIComponent(role) + "/wake", {}).then(function (data) {
      status.textContent = "woke " + role + ": " + (data.memo || "");
    }).catch(function (err) { status.textContent = "refused: " + err.message; });
  });

  // ---------------------------------------------------------------- a run's log, followed while it runs
  var log = document.getElementById("log");
  if (log) {
    var logState = document.getElementById("log-state");
    var follow = log.getAttribute("data-follow") === "1";
    var url = "/api/v1/runs/" + log.getAttribute("data-run") + "/log";
    if (follow) {
      var tail = new EventSource(url + "?follow=1");
      tail.addEventListener("log", function (ev) {
        log.textContent += JSON.parse(ev.data).text;
        log.scrollTop = log.scrollHeight;
        logState.textContent = "following";
      });
      tail.addEventListener("end", function () { logState.textContent = "ended"; tail.close(); });
      tail.onerror = function () { logState.textContent = "reconnecting…"; };
    } else {
      fetch(url, { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (d) {
        log.textContent = d.text || (d.error && d.error.message) || "";
      });
    }
  }
})();
