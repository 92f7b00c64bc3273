// troy console: fills the tables from /console/state, then follows the
// live feed (/console/events) and polls the agents every few seconds.
"use strict";

function cell(row, text, cls) {
  var td = document.createElement("td");
  if (cls) {
    var span = document.createElement("span");
    span.className = cls;
    span.textContent = text;
    td.appendChild(span);
  } else {
    td.textContent = text;
  }
  row.appendChild(td);
  return td;
}

function time(t) { return new Date(t).toLocaleTimeString(); }

var MAX_ROWS = 200;
var seen = {};

// insert keeps a table newest first, whatever order rows arrive in (the
// state a page loads and the live feed overlap), and each row once.
function insert(tableId, key, row, t, fresh) {
  if (seen[key]) { return false; }
  seen[key] = true;
  var body = document.querySelector("#" + tableId + " tbody");
  var at = new Date(t).getTime();
  row.dataset.t = String(at);
  if (fresh) { row.className = "fresh"; }
  var before = null;
  for (var i = 0; i < body.rows.length; i++) {
    if (Number(body.rows[i].dataset.t) < at) { before = body.rows[i]; break; }
  }
  body.insertBefore(row, before);
  while (body.rows.length > MAX_ROWS) { body.deleteRow(body.rows.length - 1); }
  return true;
}

function addViolation(v, fresh) {
  var row = document.createElement("tr");
  row.dataset.trace = v.trace_id;
  cell(row, time(v.time));
  cell(row, v.severity, "sev " + v.severity);
  cell(row, v.rule_id);
  cell(row, v.trace_id);
  cell(row, v.step_id);
  cell(row, v.agent);
  cell(row, v.message);
  insert("violations", ["v", v.time, v.trace_id, v.step_id, v.rule_id].join("|"), row, v.time, fresh);
  document.getElementById("violation-count").textContent = "(" + document.querySelector("#violations tbody").rows.length + ")";
}

function addReport(r, fresh) {
  var row = document.createElement("tr");
  cell(row, time(r.time));
  var a = document.createElement("a");
  a.href = "/console/traces/" + r.seq;
  a.textContent = r.trace_id;
  a.className = "trace-link";
  cell(row, "").appendChild(a);
  cell(row, String(r.steps));
  cell(row, String(r.risk_score));
  ["critical", "high", "medium", "low"].forEach(function (s) { cell(row, String((r.severity_counts || {})[s] || 0)); });
  insert("reports", "r|" + r.seq, row, r.time, fresh);
}

function problem(text) {
  var p = document.getElementById("problem");
  p.hidden = !text;
  p.textContent = text || "";
}

function needLogin() {
  document.getElementById("login").hidden = false;
  document.getElementById("app").hidden = true;
}

function state() {
  return fetch("/console/state", { credentials: "same-origin" }).then(function (res) {
    if (res.status === 401) { needLogin(); throw new Error("sign in"); }
    if (!res.ok) { throw new Error("state: " + res.status); }
    return res.json();
  }).then(function (st) {
    (st.violations || []).forEach(function (v) { addViolation(v, false); });
    (st.reports || []).forEach(function (r) { addReport(r, false); });
    problem(st.problem);
  });
}

function load() {
  return state().then(function () {
    follow();
    agents();
    setInterval(agents, 5000);
  });
}

// follow the live feed; every (re)connection reloads the state too, so
// what came while it was away is filled in (rows are deduplicated).
function follow() {
  var live = document.getElementById("live");
  var es = new EventSource("/console/events");
  es.addEventListener("hello", function () {
    live.textContent = "live"; live.className = "pill on";
    state().catch(function (err) { problem(String(err.message)); });
  });
  es.addEventListener("violation", function (e) { addViolation(JSON.parse(e.data), true); });
  es.addEventListener("report", function (e) { addReport(JSON.parse(e.data), true); });
  es.addEventListener("lagged", function () { es.close(); live.textContent = "catching up…"; live.className = "pill off"; setTimeout(follow, 1000); });
  es.onerror = function () { live.textContent = "reconnecting…"; live.className = "pill off"; };
}

function agents() {
  fetch("/console/agents", { credentials: "same-origin" }).then(function (res) { return res.json(); }).then(function (st) {
    var sb = document.querySelector("#sessions tbody");
    sb.textContent = "";
    (st.sessions || []).forEach(function (s) {
      var row = document.createElement("tr");
      cell(row, time(s.updated_at)); cell(row, s.agent); cell(row, s.run_id); cell(row, s.status);
      cell(row, s.goal); cell(row, String(s.iterations)); cell(row, "$" + (s.cost_usd || 0).toFixed(4));
      sb.appendChild(row);
    });
    var ab = document.querySelector("#approvals tbody");
    ab.textContent = "";
    (st.approvals || []).forEach(function (a) {
      var row = document.createElement("tr");
      var req = a.request || {};
      cell(row, time(a.created_at)); cell(row, req.run_id || ""); cell(row, (req.tool || "") + " " + JSON.stringify(req.arguments || {}));
      cell(row, req.rationale || ""); cell(row, time(a.deadline));
      var td = cell(row, "");
      [["Approve", true], ["Deny", false]].forEach(function (b) {
        var btn = document.createElement("button");
        btn.textContent = b[0];
        btn.className = b[1] ? "approve" : "deny";
        btn.onclick = function () { decide(a.id, b[1]); };
        td.appendChild(btn);
      });
      ab.appendChild(row);
    });
    if (st.problems) { problem(st.problems.join("; ")); }
  });
}

function decide(id, approved) {
  var reason = approved ? "" : (prompt("Why deny? The agent reads it.") || "");
  if (!approved && !reason) { return; }
  fetch("/v1/approvals/" + encodeURIComponent(id), {
    method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ approved: approved, reason: reason, by: "console" })
  }).then(function (res) {
    if (!res.ok) { return res.json().then(function (e) { problem(e.error || ("approval: " + res.status)); }); }
    agents();
  });
}

document.getElementById("login-form").addEventListener("submit", function (e) {
  e.preventDefault();
  fetch("/console/login", {
    method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: document.getElementById("token").value })
  }).then(function (res) {
    if (res.ok) { location.reload(); return; }
    return res.json().then(function (err) { document.getElementById("login-error").textContent = err.error; });
  });
});

load().catch(function (err) { if (String(err.message) !== "sign in") { problem(String(err.message)); } });
