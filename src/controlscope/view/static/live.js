// controlscope view: a page of a run whose log is still being written reloads itself when the
// log changes, keeping the scroll position and which sections were open. Hand-written, no
// dependencies; served as a file so the pages' content security policy allows no inline script.
(function () {
  "use strict";
  var body = document.body;
  var url = body.dataset.stampUrl;
  var seen = body.dataset.stamp;
  var key = "controlscope-view:" + location.pathname;
  if (!url) { return; }
  var saved = sessionStorage.getItem(key);
  if (saved) {
    sessionStorage.removeItem(key);
    var state = JSON.parse(saved);
    Object.keys(state.open).forEach(function (id) {
      var el = document.getElementById(id);
      if (el && el.tagName === "DETAILS") { el.open = state.open[id]; }
    });
    window.scrollTo(0, state.y);
  }
  function reload() {
    var open = {};
    document.querySelectorAll("details[id]").forEach(function (el) { open[el.id] = el.open; });
    sessionStorage.setItem(key, JSON.stringify({ y: window.scrollY, open: open }));
    location.reload();
  }
  function poll() {
    fetch(url, { cache: "no-store" })
      .then(function (r) { return r.text(); })
      .then(function (now) { if (now !== seen) { reload(); } else { setTimeout(poll, 2000); } })
      .catch(function () { setTimeout(poll, 5000); });
  }
  setTimeout(poll, 2000);
})();
