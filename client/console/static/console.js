// rill console: re-fetch the live part of the page every few seconds and swap it in.
// The server renders (and escapes) the HTML; this script only moves it into place.
(function () {
  "use strict";
  var live = document.querySelector("[data-live]");
  var stamp = document.getElementById("refreshed");
  var every = Number(document.body.getAttribute("data-refresh-ms")) || 2000;
  if (!live) {
    return;
  }
  function say(text, failed) {
    if (stamp) {
      stamp.textContent = text;
      stamp.className = failed ? "refreshed bad" : "refreshed";
    }
  }
  function refresh() {
    fetch(live.getAttribute("data-live"), {credentials: "same-origin", cache: "no-store"})
      .then(function (response) { return response.text(); })
      .then(function (html) {
        live.innerHTML = html;
        say("updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function () {
        say("the console is not answering (is rill console still running?)", true);
      })
      .then(function () { window.setTimeout(refresh, every); });
  }
  window.setTimeout(refresh, every);
})();
