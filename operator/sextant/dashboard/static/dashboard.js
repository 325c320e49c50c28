// Sextant dashboard: keeps the page's live regions current and sends its actions. No library, no build step.
(function () {
  "use strict";
  const flash = document.getElementById("flash");
  const FORCE_MS = 10000; // ages and the chart move with time: ask again in full this often

  function say(text, ok) {
    flash.textContent = text;
    flash.className = ok ? "ok" : "bad";
  }

  const regions = Array.from(document.querySelectorAll("[data-live]"));
  regions.forEach(function (r) { r.dataset.at = String(Date.now()); });

  async function refresh(r) {
    if (r.dataset.busy === "1") return;
    r.dataset.busy = "1";
    const url = new URL(r.dataset.live, window.location.origin);
    const fresh = Date.now() - Number(r.dataset.at) < FORCE_MS;
    if (fresh && r.dataset.version) url.searchParams.set("v", r.dataset.version);
    try {
      const resp = await fetch(url, { headers: { Accept: "text/html" } });
      if (resp.status === 200) {
        r.innerHTML = await resp.text();
        r.dataset.at = String(Date.now());
        const v = resp.headers.get("X-Version");
        if (v) r.dataset.version = v;
        document.body.classList.remove("offline");
      }
    } catch (err) {
      document.body.classList.add("offline"); // the dashboard process is gone: keep the last view
    } finally {
      r.dataset.busy = "0";
    }
  }

  // Regions without a version (schedules, workers) are read in full each time: every 2 s is enough.
  let tick = 0;
  setInterval(function () {
    tick += 1;
    regions.forEach(function (r) { if (r.dataset.version || tick % 2 === 0) refresh(r); });
  }, 1000);

  document.addEventListener("click", async function (ev) {
    const button = ev.target.closest("button[data-action]");
    if (!button) return;
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    button.disabled = true;
    try {
      // The session cookie (SameSite=Strict, HttpOnly) goes with it: this page holds no secret of its own.
      const resp = await fetch(button.dataset.action, { method: "POST", credentials: "same-origin" });
      const body = await resp.json();
      say(body.message, body.ok);
      regions.forEach(function (r) { r.dataset.at = "0"; refresh(r); });
    } catch (err) {
      say("the dashboard did not answer: " + err, false);
    } finally {
      button.disabled = false;
    }
  });

  const form = document.getElementById("filters");
  if (form) {
    form.addEventListener("change", function (ev) {
      if (ev.target.tagName === "SELECT") form.submit();
    });
  }
})();
