// Live status: re-fetch the changing part of an experiment page while runs are active
// (and until the figures have caught up), without a full reload.
(function () {
  "use strict";
  const POLL_MS = 2000;

  function poll(container) {
    const url = container.dataset.liveUrl;
    const tick = function () {
      fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) {
          container.innerHTML = html;
          if (isActive(container)) { window.setTimeout(tick, POLL_MS); }
        })
        .catch(function () { window.setTimeout(tick, POLL_MS * 3); });
    };
    if (isActive(container)) { window.setTimeout(tick, POLL_MS); }
  }

  function isActive(container) {
    const root = container.querySelector("[data-active]");
    return root !== null && root.dataset.active === "true";
  }

  // New-experiment form: show the parts of the chosen system's arena (data-arenas) and mode
  // (data-modes; the server ignores the others) and preselect the baselines of its arena.
  function experimentForm() {
    const data = document.getElementById("catalogue-data");
    const system = document.getElementById("id_system");
    if (!data || !system) { return; }
    const catalogue = JSON.parse(data.textContent);
    const byName = Object.fromEntries(catalogue.map(function (e) { return [e.name, e]; }));
    const hint = document.getElementById("param-hint");
    const showArena = function () {
      const chosen = byName[system.value];
      if (!chosen) { return; }
      const mode = document.getElementById("id_mode");
      document.querySelectorAll("#experiment-form [data-arenas]").forEach(function (part) {
        const modes = part.dataset.modes ? part.dataset.modes.split(" ") : null;
        part.hidden = part.dataset.arenas.split(" ").indexOf(chosen.arena) < 0 ||
          (modes !== null && mode !== null && modes.indexOf(mode.value) < 0);
      });
      if (hint) {
        const params = chosen.params.map(function (p) { return p.name + " (default " + p.default + ")"; });
        hint.textContent = params.length ? "Parameters of " + chosen.name + ": " + params.join(", ")
                                         : chosen.name + " has no parameters.";
      }
    };
    const preselect = function () {
      const chosen = byName[system.value];
      if (!chosen) { return; }
      document.querySelectorAll("input[name=baselines]").forEach(function (box) {
        const entry = byName[box.value];
        const sameArena = entry && entry.arena === chosen.arena;
        box.checked = sameArena && entry.role === "baseline" && entry.name !== chosen.name;
        box.disabled = !sameArena || entry.name === chosen.name;
      });
    };
    system.addEventListener("change", function () { preselect(); showArena(); });
    const modeField = document.getElementById("id_mode");
    if (modeField) { modeField.addEventListener("change", showArena); }
    showArena();
    // Shown again with errors: the member's own baseline choices stand.
    if (!document.querySelector(".field.invalid")) { preselect(); }
  }

  document.addEventListener("DOMContentLoaded", function () {
    const live = document.getElementById("live");
    if (live) { poll(live); }
    experimentForm();
  });
})();
