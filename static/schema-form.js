// Forms generated from a tool's inputSchema. Each field renders itself and returns a reader;
// what the form cannot express (oneOf, anyOf, $ref, …) gets a JSON box of its own.
import { h } from "./ws.js";

let nextId = 0;
const fieldId = () => `arg-${++nextId}`;

function mainType(schema) {
  const type = schema.type;
  if (Array.isArray(type)) return type.find((t) => t !== "null") ?? "string";
  if (type) return type;
  if (schema.enum) return "enum";
  if (schema.properties) return "object";
  return undefined;
}

function isSimple(schema) {
  return !(schema.oneOf || schema.anyOf || schema.allOf || schema.$ref || schema.not);
}

function labelFor(name, schema, required) {
  const text = schema.title || name || "value";
  return h("label", { for: null }, text, required ? h("span", { class: "required", "aria-hidden": "true", text: " *" }) : null);
}

function wrap(path, label, control, schema, inputId) {
  label.setAttribute("for", inputId);
  const help = schema.description ? h("div", { class: "help", id: `${inputId}-help`, text: schema.description }) : null;
  if (help) control.setAttribute("aria-describedby", `${inputId}-help`);
  return h("div", { class: "field", "data-path": JSON.stringify(path) }, label, control, help, h("div", { class: "error", role: "alert" }));
}

const ABSENT = Symbol("absent");

// The options of an enum as {value, title}: `enum` (with the older `enumNames`), or `oneOf` / `anyOf`
// of `{const, title}` (MCP's titled enums). Null when the schema is no enum.
function choices(schema) {
  const titled = schema.oneOf || schema.anyOf;
  if (Array.isArray(titled) && titled.length > 0 && titled.every((option) => option && "const" in option)) {
    return titled.map((option) => ({ value: option.const, title: String(option.title ?? option.const) }));
  }
  if (Array.isArray(schema.enum)) {
    const names = Array.isArray(schema.enumNames) ? schema.enumNames : [];
    return schema.enum.map((option, i) => ({ value: option, title: String(names[i] ?? option) }));
  }
  return null;
}

// What the browser knows of the field's constraints (type=email, min, max, minlength…), checked
// before anything is sent; the portal checks the answer again against the schema.
function checkValidity(input, path) {
  if (!input.checkValidity()) throw new FieldError(path, input.validationMessage || "This value is not valid.");
}

function renderMultiSelect(schema, options, name, path, required, value) {
  const chosen = new Set(Array.isArray(value) ? value : []);
  const boxes = options.map((option) => {
    const box = h("input", { type: "checkbox", checked: chosen.has(option.value) });
    return { box, option, label: h("label", { class: "checkbox" }, box, " ", option.title) };
  });
  const legend = h("legend", {}, schema.title || name, required ? h("span", { class: "required", "aria-hidden": "true", text: " *" }) : null);
  const el = h("fieldset", { class: "multi-select", "data-path": JSON.stringify(path) }, legend,
    boxes.map((b) => b.label),
    schema.description ? h("div", { class: "help", text: schema.description }) : null,
    h("div", { class: "error", role: "alert" }));
  return {
    el,
    read: () => {
      const out = boxes.filter((b) => b.box.checked).map((b) => b.option.value);
      if (schema.minItems != null && out.length < schema.minItems) {
        throw new FieldError(path, `Choose at least ${schema.minItems}.`);
      }
      if (schema.maxItems != null && out.length > schema.maxItems) {
        throw new FieldError(path, `Choose at most ${schema.maxItems}.`);
      }
      return out.length === 0 && !required ? ABSENT : out;
    },
  };
}

export function renderField(schema, name, path, required, initial) {
  schema = schema || {};
  const type = mainType(schema);
  const value = initial !== undefined ? initial : schema.default;

  const single = choices(schema);
  if (single) {
    const id = fieldId();
    // No option is picked for the person: a required choice without a default starts empty.
    const select = h("select", { id, required },
      required && value !== undefined ? null : h("option", { value: "", text: "—" }),
      single.map((option, i) => h("option", { value: String(i), text: option.title, selected: value === option.value })),
    );
    return {
      el: wrap(path, labelFor(name, schema, required), select, schema, id),
      read: () => (select.value === "" ? ABSENT : single[Number(select.value)].value),
    };
  }

  const multiple = type === "array" ? choices(schema.items || {}) : null;
  if (multiple) return renderMultiSelect(schema, multiple, name, path, required, value);

  if (!isSimple(schema) || type === undefined) return renderJson(schema, name, path, required, value);

  if (type === "boolean") {
    const id = fieldId();
    const box = h("input", { id, type: "checkbox", checked: value === true });
    const label = h("label", { for: id, class: "checkbox" }, box, " ", schema.title || name);
    const el = h("div", { class: "field", "data-path": JSON.stringify(path) }, label,
      schema.description ? h("div", { class: "help", text: schema.description }) : null, h("div", { class: "error", role: "alert" }));
    return { el, read: () => box.checked };
  }

  if (type === "number" || type === "integer") {
    const id = fieldId();
    const input = h("input", {
      id, type: "number", required, step: type === "integer" ? "1" : "any",
      min: schema.minimum ?? null, max: schema.maximum ?? null, value: value ?? null,
    });
    return {
      el: wrap(path, labelFor(name, schema, required), input, schema, id),
      read: () => {
        if (input.value.trim() === "") return ABSENT;
        checkValidity(input, path);
        const number = Number(input.value);
        return Number.isNaN(number) ? input.value : number;
      },
    };
  }

  if (type === "string") {
    const id = fieldId();
    const inputType = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" }[schema.format] || "text";
    const long = (schema.maxLength ?? 0) > 200 || schema.format === "textarea";
    const input = long
      ? h("textarea", { id, rows: 4, required, maxlength: schema.maxLength ?? null })
      : h("input", { id, type: inputType, required, minlength: schema.minLength ?? null, maxlength: schema.maxLength ?? null, pattern: schema.pattern ?? null });
    if (value !== undefined && value !== null) input.value = String(value);
    return {
      el: wrap(path, labelFor(name, schema, required), input, schema, id),
      read: () => {
        // An empty field is left out; if it was required, the schema check names it.
        if (input.value === "") return ABSENT;
        checkValidity(input, path);
        return schema.format === "date-time" && inputType === "datetime-local" ? new Date(input.value).toISOString() : input.value;
      },
    };
  }

  if (type === "object") return renderObject(schema, name, path, required, value);
  if (type === "array") return renderArray(schema, name, path, required, value);
  return renderJson(schema, name, path, required, value);
}

function renderObject(schema, name, path, required, value) {
  const props = schema.properties || {};
  const needed = new Set(schema.required || []);
  const children = Object.entries(props).map(([key, sub]) => [key, renderField(sub, key, [...path, key], needed.has(key), value?.[key])]);
  const body = children.map(([, field]) => field.el);
  const el = path.length === 0
    ? h("div", { class: "object-root", "data-path": "[]" }, body)
    : h("fieldset", { "data-path": JSON.stringify(path) }, h("legend", { text: schema.title || name }), body, h("div", { class: "error", role: "alert" }));
  return {
    el,
    read: () => {
      const out = {};
      for (const [key, field] of children) {
        const v = field.read();
        if (v !== ABSENT) out[key] = v;
      }
      if (path.length > 0 && !required && Object.keys(out).length === 0) return ABSENT;
      return out;
    },
  };
}

function renderArray(schema, name, path, required, value) {
  const itemSchema = schema.items || {};
  const list = h("ol", { class: "array-items" });
  const items = [];
  const fieldset = h("fieldset", { "data-path": JSON.stringify(path) }, h("legend", { text: schema.title || name }), list);

  function add(initial) {
    const index = items.length;
    const field = renderField(itemSchema, `${schema.title || name} ${index + 1}`, [...path, index], true, initial);
    const entry = { field };
    const remove = h("button", { type: "button", class: "link", text: `Remove item ${index + 1}`, onclick: () => {
      items.splice(items.indexOf(entry), 1);
      li.remove();
    } });
    const li = h("li", {}, field.el, remove);
    entry.li = li;
    items.push(entry);
    list.append(li);
  }
  (Array.isArray(value) ? value : []).forEach(add);
  fieldset.append(h("button", { type: "button", text: `Add ${schema.title || name} item`, onclick: () => add(undefined) }), h("div", { class: "error", role: "alert" }));
  return {
    el: fieldset,
    read: () => {
      const out = items.map((entry) => entry.field.read()).filter((v) => v !== ABSENT);
      return out.length === 0 && !required ? ABSENT : out;
    },
  };
}

function renderJson(schema, name, path, required, value) {
  const id = fieldId();
  const area = h("textarea", { id, rows: 4, spellcheck: "false", class: "json" });
  if (value !== undefined) area.value = JSON.stringify(value, null, 2);
  const label = labelFor(name, schema, required);
  label.append(h("span", { class: "muted small", text: " (JSON)" }));
  return {
    el: wrap(path, label, area, schema, id),
    read: () => {
      if (area.value.trim() === "") return ABSENT;
      try {
        return JSON.parse(area.value);
      } catch {
        throw new FieldError(path, "This is not valid JSON.");
      }
    },
  };
}

export class FieldError extends Error {
  constructor(path, message) {
    super(message);
    this.path = path;
  }
}

export function buildForm(schema, initial) {
  const root = renderField({ type: "object", ...(schema || {}) }, "", [], true, initial);
  return root;
}

// Show {path, message} errors beside their fields; what matches no field goes to `fallback`.
export function showErrors(container, errors, fallback) {
  for (const el of container.querySelectorAll(".error")) el.textContent = "";
  for (const el of container.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  const unplaced = [];
  for (const error of errors) {
    let path = error.path;
    let field = null;
    while (field === null) {
      const wanted = JSON.stringify(path);
      field = [...container.querySelectorAll("[data-path]")].find((el) => el.dataset.path === wanted) || null;
      if (field || path.length === 0) break;
      path = path.slice(0, -1);
    }
    if (!field || path.length === 0) {
      unplaced.push(error.path.length ? `${error.path.join(".")}: ${error.message}` : error.message);
      continue;
    }
    const slot = [...field.children].reverse().find((el) => el.classList.contains("error"));
    if (slot) slot.textContent = error.message;
    field.querySelector("input, select, textarea")?.setAttribute("aria-invalid", "true");
  }
  fallback.textContent = unplaced.join("\n");
}
