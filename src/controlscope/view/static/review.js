// controlscope: the review page. A person decides at the boundary shown: the decision is
// checked against the tool's input schema here, then sent with the run's secret (it is in the
// address the run printed, after #key=, and kept for this tab only); the run validates it
// again as a model's. The page reloads itself when a boundary arrives or leaves. Hand-written,
// no dependencies; served as a file so the pages' content security policy allows no inline
// script.
(function () {
  "use strict";
  var root = document.getElementById("review");
  if (!root) { return; }
  var store = "controlscope-review-key";
  var match = /(?:^#|&)key=([^&]+)/.exec(location.hash);
  if (match) { sessionStorage.setItem(store, decodeURIComponent(match[1])); }
  var key = sessionStorage.getItem(store) || "";
  if (!key) { document.getElementById("review-key-missing").hidden = false; }
  var ticket = root.dataset.ticket || "";
  var message = document.getElementById("review-message");

  function say(text, bad) {
    message.textContent = text;
    message.className = bad ? "problem" : "live";
  }
  var deciding = false;  // a decision was sent and its answer has not come back
  var changed = false;  // the desk changed: the page reloads
  var flash = "controlscope-review-flash";
  if (sessionStorage.getItem(flash)) {  // the answer to a decision, kept across the reload
    say(sessionStorage.getItem(flash), false);
    sessionStorage.removeItem(flash);
  }

  function show(value) { return JSON.stringify(value); }

  function typeOf(value) {
    if (value === null) { return "null"; }
    if (Array.isArray(value)) { return "array"; }
    if (typeof value === "number") { return Number.isInteger(value) ? "integer" : "number"; }
    return typeof value;
  }

  function hasType(value, type) {
    var actual = typeOf(value);
    return actual === type || (type === "number" && actual === "integer");
  }

  // The schema's reasons, worded as the run's validation (jsonschema) words them.
  function problems(name, value, schema) {
    var found = [];
    var types = schema.type === undefined ? [] : [].concat(schema.type);
    if (types.length && !types.some(function (t) { return hasType(value, t); })) {
      var shown = types.length === 1 ? "'" + types[0] + "'" : show(types);
      found.push(name + ": " + show(value) + " is not of type " + shown);
      return found;
    }
    if (schema.enum && !schema.enum.some(function (e) { return show(e) === show(value); })) {
      found.push(name + ": " + show(value) + " is not one of " + show(schema.enum));
    }
    if (typeof value === "number") {
      if (schema.minimum !== undefined && value < schema.minimum) {
        found.push(name + ": " + value + " is less than the minimum of " + schema.minimum);
      }
      if (schema.maximum !== undefined && value > schema.maximum) {
        found.push(name + ": " + value + " is greater than the maximum of " + schema.maximum);
      }
    }
    if (typeof value === "string") {
      if (schema.minLength !== undefined && value.length < schema.minLength) {
        found.push(name + ": " + show(value) + " is too short");
      }
      if (schema.maxLength !== undefined && value.length > schema.maxLength) {
        found.push(name + ": " + show(value) + " is too long");
      }
    }
    return found;
  }

  // A field's text as a value of its kind: numbers and booleans read as such, JSON parsed;
  // text that is not of the kind stays text (the schema check then names it).
  function valueOf(field) {
    var text = field.value;
    var kind = field.dataset.kind;
    if (kind === "string") { return text; }
    if (kind === "integer" || kind === "number") {
      var number = Number(text.trim());
      return text.trim() !== "" && isFinite(number) ? number : text;
    }
    if (kind === "boolean") { return text === "true" ? true : text === "false" ? false : text; }
    try { return JSON.parse(text); } catch (err) { throw new Error(field.dataset.name + ": not JSON (" + err.message + ")"); }
  }

  function editedArguments() {
    var changed = {};
    var found = [];
    document.querySelectorAll(".arg").forEach(function (field) {
      if (field.disabled) { return; }
      var given = field.dataset.given === "true";
      if (field.value === field.dataset.initial && (given || field.value === "")) { return; }
      var value = valueOf(field);
      found = found.concat(problems(field.dataset.name, value, JSON.parse(field.dataset.schema)));
      changed[field.dataset.name] = value;
    });
    if (found.length) { throw new Error("the tool's input schema refuses this: " + found.join("; ")); }
    if (!Object.keys(changed).length) { throw new Error("no argument was changed"); }
    return changed;
  }

  function decide(operation, fields) {
    if (!key) { say("this page does not hold the run's secret: open the address the run printed", true); return; }
    var body = { ticket: ticket, operation: operation };
    var reason = document.getElementById("review-reason");
    if (reason && reason.value) { body.reason = reason.value; }
    Object.keys(fields).forEach(function (k) { body[k] = fields[k]; });
    say("sending…", false);
    deciding = true;
    fetch("/_review/decide", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Review-Key": key },
      body: JSON.stringify(body),
      cache: "no-store"
    })
      .then(function (r) { return r.json(); })
      .then(function (answer) {
        if (answer.answer === "accepted") {
          var text = "accepted (" + operation + "): the run goes on with it";
          sessionStorage.setItem(flash, text);
          say(text, false);
        } else {
          say("refused (" + answer.answer + "): " + answer.detail + (answer.answer === "refused" ? "; change it and try again" : ""), true);
        }
      })
      .catch(function (err) { say("not sent: " + err, true); })
      .then(function () {
        deciding = false;
        if (changed) { location.reload(); }
      });
  }

  document.querySelectorAll("button.decide").forEach(function (button) {
    button.addEventListener("click", function () {
      var kind = button.dataset.kind;
      var payload = button.dataset.payload;
      if (payload === "arguments") {
        var changed;
        try { changed = editedArguments(); } catch (err) { say(err.message, true); return; }
        decide(kind, { arguments: changed });
      } else if (payload === "code") {
        decide(kind, { code: document.getElementById("code-" + kind).value });
      } else {
        decide(kind, {});
      }
    });
  });

  root.dataset.ready = "true";  // the buttons answer from now on
  var seen = root.dataset.version;
  function poll() {
    fetch("/_review/wait?v=" + encodeURIComponent(seen), { cache: "no-store" })
      .then(function (r) { return r.text(); })
      .then(function (now) {
        if (now === seen) { poll(); return; }
        changed = true;  // reloaded now, or once the decision's answer is shown
        if (!deciding) { location.reload(); }
      })
      .catch(function () { setTimeout(poll, 2000); });
  }
  poll();
})();
