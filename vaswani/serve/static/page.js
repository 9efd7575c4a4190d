// The translation page of `vaswani serve` (vaswani/serve/page.py): it asks the server what it offers
// (frontend/settings, languages), then translates through the LibreTranslate API (POST translate) as the text is
// typed and on the button. Plain JavaScript, no build step; it calls this server only.
"use strict";

const page = {
  settings: null,
  timer: null,
  asked: 0, // the number of the latest request: an older answer arriving late is dropped
};

function element(id) {
  return document.getElementById(id);
}

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  if (!response.ok) {
    throw new Error(`${path} answered ${response.status}`);
  }
  return response.json();
}

async function start() {
  try {
    const [settings, languages] = await Promise.all([getJson("frontend/settings"), getJson("languages")]);
    page.settings = settings;
    const names = Object.fromEntries(languages.map((language) => [language.code, language.name]));
    const pairs = element("pair");
    for (const pair of settings.pairs) {
      const option = document.createElement("option");
      option.value = `${pair.source}|${pair.target}`;
      option.textContent = `${names[pair.source] || pair.source} → ${names[pair.target] || pair.target}`;
      pairs.append(option);
    }
    element("key-field").hidden = !settings.keyRequired;
    element("spec").href = settings.spec;
    count();
  } catch (error) {
    showError(`The server's settings cannot be read (${error.message}): is the server running?`);
    return;
  }
  element("source").addEventListener("input", () => {
    count();
    clearTimeout(page.timer);
    page.timer = setTimeout(translate, page.settings.frontendTimeout);
  });
  element("translate").addEventListener("click", () => {
    clearTimeout(page.timer);
    translate();
  });
  for (const id of ["pair", "alternatives", "api-key"]) {
    element(id).addEventListener("change", translate);
  }
}

function count() {
  const length = element("source").value.length;
  element("count").textContent = `${length} / ${page.settings.charLimit} characters`;
}

function showError(message) {
  const box = element("error");
  box.textContent = message;
  box.hidden = !message;
}

function showStatus(message) {
  element("status").textContent = message;
}

function showAlternatives(alternatives) {
  const list = element("alternative-list");
  list.replaceChildren(
    ...(alternatives || []).map((text) => {
      const item = document.createElement("li");
      item.textContent = text;
      return item;
    }),
  );
  list.hidden = !list.children.length;
}

// A refusal of the server in words: what happened and what to do (the server's own message in brackets).
function describeRefusal(response, answer) {
  const said = answer && typeof answer.error === "string" ? answer.error : response.statusText;
  switch (response.status) {
    case 400:
      return `The server cannot translate this request: ${said}`;
    case 403:
      return element("api-key").value
        ? `The API key was refused: check it and try again. (${said})`
        : `This server needs an API key: type yours in the API key field. (${said})`;
    case 408:
      return `The translation took longer than the server allows: translate less text at a time. (${said})`;
    case 413:
      return `The text is too long for this server: translate less text at a time. (${said})`;
    case 429: {
      const wait = response.headers.get("Retry-After");
      return `Too many requests: wait ${wait ? `${wait} s` : "a moment"} and try again. (${said})`;
    }
    default:
      return `The server answered ${response.status}: ${said}`;
  }
}

async function translate() {
  const text = element("source").value;
  const number = ++page.asked;
  if (!page.settings || !text.trim()) {
    element("translation").textContent = "";
    showAlternatives([]);
    showError("");
    showStatus("");
    return;
  }
  if (text.length > page.settings.charLimit) {
    showError(`The text has ${text.length} characters; this server translates at most ${page.settings.charLimit} at a time.`);
    return;
  }
  const [source, target] = element("pair").value.split("|");
  const body = { q: text, source, target, format: "text" };
  const alternatives = Number(element("alternatives").value);
  if (alternatives > 0) {
    body.alternatives = alternatives;
  }
  const key = element("api-key").value;
  if (key) {
    body.api_key = key;
  }
  showStatus("Translating…");
  let response;
  let answer = null;
  try {
    response = await fetch("translate", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body),
    });
    answer = await response.json().catch(() => null);
  } catch (error) {
    if (number === page.asked) {
      showStatus("");
      showError(`The server cannot be reached (${error.message}).`);
    }
    return;
  }
  if (number !== page.asked) {
    return; // a newer request was sent meanwhile
  }
  showStatus("");
  if (!response.ok || !answer) {
    showError(describeRefusal(response, answer));
    return;
  }
  showError("");
  element("translation").textContent = answer.translatedText;
  showAlternatives(answer.alternatives);
}

document.addEventListener("DOMContentLoaded", start);
