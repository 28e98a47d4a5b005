// paddock dashboard: keeps the server-rendered pages fresh. The pages read fully without
// this script; it only subscribes to the daemon's event stream (same origin, the session
// cookie) and re-fetches the job table, and follows the last exec's output on a job page.
"use strict";

(function () {
  const JOB_EVENTS = ["job.created", "job.state", "job.removed", "exec.finished",
    "job.sync_failed", "job.branch_rewritten", "sweep.done"];

  function markLive(on) {
    const badge = document.getElementById("live");
    if (badge) { badge.hidden = !on; }
  }

  function subscribe(url, onEvent) {
    const source = new EventSource(url);
    source.onopen = function () { markLive(true); };
    source.onerror = function () { markLive(false); };
    JOB_EVENTS.forEach(function (name) {
      source.addEventListener(name, function (e) {
        let data = null;
        try { data = JSON.parse(e.data); } catch (_) { /* an id-only event */ }
        onEvent(name, data);
      });
    });
    return source;
  }

  // The job table: re-fetch the fragment on job events (coalesced), and every 10 s for the
  // containers' CPU and memory, which change without events.
  const table = document.getElementById("jobs");
  if (table) {
    let pending = null;
    let running = false;
    const refresh = function () {
      if (running) { pending = pending || setTimeout(refresh, 250); return; }
      pending = null;
      running = true;
      fetch(table.dataset.fragment, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) { table.innerHTML = html; })
        .catch(function () { markLive(false); })
        .finally(function () { running = false; });
    };
    const soon = function () { if (!pending) { pending = setTimeout(refresh, 150); } };
    subscribe("/v1/events", soon);
    setInterval(soon, 10000);
  }

  // A job page: the state badge follows the job's events; the last exec's output follows.
  const jobId = document.getElementById("job-id");
  if (jobId) {
    const id = jobId.textContent;
    subscribe("/v1/events?job=" + encodeURIComponent(id), function (name, event) {
      const badge = document.getElementById("job-state");
      if (badge && event && event.state) {
        badge.textContent = event.state;
        badge.className = "state state-" + event.state;
      }
    });
  }
  const log = document.getElementById("log");
  if (log && log.dataset.exec) {
    const url = "/v1/jobs/" + encodeURIComponent(log.dataset.job) + "/execs/" +
      encodeURIComponent(log.dataset.exec) + "/output?follow=true&offset=" + log.dataset.offset;
    fetch(url, { credentials: "same-origin" }).then(function (response) {
      if (!response.ok || !response.body) { return; }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffered = "";
      const pump = function () {
        return reader.read().then(function (step) {
          if (step.done) { return; }
          buffered += decoder.decode(step.value, { stream: true });
          let newline;
          while ((newline = buffered.indexOf("\n")) >= 0) {
            const line = buffered.slice(0, newline);
            buffered = buffered.slice(newline + 1);
            try {
              const chunk = JSON.parse(line);
              if (typeof chunk.data === "string") {
                log.appendChild(document.createTextNode(chunk.data));
                log.scrollTop = log.scrollHeight;
              }
            } catch (_) { /* a cut line */ }
          }
          return pump();
        });
      };
      return pump();
    }).catch(function () { /* the page still shows what was there */ });
  }
})();
