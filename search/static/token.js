// The tab's access token for the pages of bertindex serve: taken from the URL fragment
// (#token=..., as `serve` prints it) or typed into the form shown after a 401, kept in
// sessionStorage (this tab only, gone when it closes), sent as `Authorization: Bearer`.
// The fragment never reaches the server, and it is removed from the address bar at once so
// a bookmark or a shared link never carries the token. Builds its form with DOM calls only.
"use strict";

const bertindexToken = (() => {
  const KEY = "bertindex-token";
  const fragment = new URLSearchParams(window.location.hash.slice(1));
  if (fragment.get("token")) {
    sessionStorage.setItem(KEY, fragment.get("token"));
    fragment.delete("token");
    const url = new URL(window.location);
    url.hash = fragment.toString();
    window.history.replaceState(null, "", url);
  }

  function headers(extra) {
    const out = Object.assign({}, extra || {});
    const token = sessionStorage.getItem(KEY);
    if (token) out.Authorization = `Bearer ${token}`;
    return out;
  }

  // A clear sentence for a refused call: 401 (no token, or one not accepted), 403 (scope or host)
  function explain(status, detail) {
    if (status === 401) {
      return (sessionStorage.getItem(KEY) ? "This token was not accepted" : "This server needs an access token") +
        ` (401: ${detail}). Paste a token below, or open the address bertindex serve printed.`;
    }
    if (status === 403) return `Not allowed (403): ${detail}`;
    return detail;
  }

  // Show the token form at the top of the page; `onSaved` runs once a token is entered
  function ask(onSaved) {
    let form = document.getElementById("token-form");
    if (!form) {
      form = document.createElement("form");
      form.id = "token-form";
      form.className = "token-form";
      const label = document.createElement("label");
      label.textContent = "access token ";
      const input = document.createElement("input");
      input.id = "token-input";
      input.type = "password";
      input.autocomplete = "off";
      input.size = 40;
      label.append(input);
      const use = document.createElement("button");
      use.type = "submit";
      use.id = "token-use";
      use.textContent = "Use token";
      form.append(label, use);
      document.body.prepend(form);
    }
    form.hidden = false;
    form.onsubmit = (event) => {
      event.preventDefault();
      const value = document.getElementById("token-input").value.trim();
      if (!value) return;
      sessionStorage.setItem(KEY, value);
      form.hidden = true;
      onSaved();
    };
    document.getElementById("token-input").focus();
  }

  return { headers, explain, ask };
})();
