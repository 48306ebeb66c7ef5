// RFC 6570 URI templates, levels 1–3 (and the :prefix and * modifiers of level 4, for strings):
// enough to fill in the resource templates MCP servers publish, e.g. demo://greeting/{name}.

const OPERATORS = {
  "": { first: "", sep: ",", named: false, reserved: false },
  "+": { first: "", sep: ",", named: false, reserved: true },
  "#": { first: "#", sep: ",", named: false, reserved: true },
  ".": { first: ".", sep: ".", named: false, reserved: false },
  "/": { first: "/", sep: "/", named: false, reserved: false },
  ";": { first: ";", sep: ";", named: true, reserved: false, emptyBare: true },
  "?": { first: "?", sep: "&", named: true, reserved: false },
  "&": { first: "&", sep: "&", named: true, reserved: false },
};

const EXPRESSION = /\{([^{}]*)\}/g;

function parseExpression(body) {
  const op = OPERATORS[body[0]] ? body[0] : "";
  const names = body.slice(op.length).split(",").filter(Boolean).map((spec) => {
    const match = /^([^:*]+)(?::(\d+)|(\*))?$/.exec(spec.trim());
    return match ? { name: match[1], prefix: match[2] ? Number(match[2]) : null } : { name: spec.trim(), prefix: null };
  });
  return { op, names };
}

// The variables a template asks for, in order, each once.
export function variables(template) {
  const seen = [];
  for (const [, body] of template.matchAll(EXPRESSION)) {
    for (const { name } of parseExpression(body).names) if (!seen.includes(name)) seen.push(name);
  }
  return seen;
}

function encode(value, reserved) {
  if (reserved) {
    // Reserved and unreserved characters pass, as do existing %XX escapes; the rest is encoded.
    return value.replace(/%(?![0-9A-Fa-f]{2})|[^A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]/gu, (c) => encodeURIComponent(c));
  }
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

// Fill a template with string values; a variable left empty or missing is left out, as RFC 6570 says.
export function expand(template, values) {
  return template.replace(EXPRESSION, (_, body) => {
    const { op, names } = parseExpression(body);
    const spec = OPERATORS[op];
    const parts = [];
    for (const { name, prefix } of names) {
      const raw = values[name];
      if (raw === undefined || raw === null) continue;
      let value = String(raw);
      if (prefix !== null) value = [...value].slice(0, prefix).join("");
      const encoded = encode(value, spec.reserved);
      if (!spec.named) parts.push(encoded);
      else if (value === "" && spec.emptyBare) parts.push(name);
      else parts.push(`${name}=${encoded}`);
    }
    return parts.length ? spec.first + parts.join(spec.sep) : "";
  });
}
