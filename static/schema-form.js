// Forms generated from a JSON Schema: a tool's inputSchema, or an elicitation's requested schema.
//
// Local `$ref`s (`$defs`, `definitions`, any `#/…` pointer) are followed, `allOf` is merged where the
// parts agree, `oneOf` / `anyOf` become a variant picker, "or null" becomes a null toggle, and every
// constraint is written beside its field and checked here the way the portal's Draft 2020-12
// validator checks it (lengths in code points, `pattern` searched anywhere, exclusive bounds), so a
// person sees what is wrong before anything is sent. What a form cannot hold (a cycle, a free-form
// map, a tuple, `not`, `if`) gets a JSON box of its own.
//
// Each field returns {el, read(path, errors)}: read collects every error as {path, message} rather
// than stopping at the first, and takes the path when it reads (array items move when one goes).
import { h } from "./ws.js";

const ABSENT = Symbol("absent");
let nextId = 0;
const fieldId = () => `arg-${++nextId}`;

export class FieldError extends Error {
  constructor(path, message, errors) {
    super(message);
    this.path = path;
    this.errors = errors || [{ path, message }];
  }
}

// -- the schema: references, allOf, variants --------------------------------------------------

const isObject = (value) => typeof value === "object" && value !== null && !Array.isArray(value);

function sameJson(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

// A local reference (`#`, `#/$defs/Name`, `#/definitions/Name`, any JSON pointer) in the root schema.
function lookup(root, ref) {
  if (typeof ref !== "string" || !ref.startsWith("#")) return undefined;
  if (ref === "#") return root;
  if (!ref.startsWith("#/")) return undefined;
  let node = root;
  for (const part of ref.slice(2).split("/")) {
    const key = decodeURIComponent(part).replaceAll("~1", "/").replaceAll("~0", "~");
    if (!isObject(node) && !Array.isArray(node)) return undefined;
    node = node[key];
    if (node === undefined) return undefined;
  }
  return node;
}

const LOWER_BOUNDS = ["minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"];
const UPPER_BOUNDS = ["maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"];
// Words about a schema, not constraints: the first one given wins.
const ANNOTATIONS = ["title", "description", "default", "examples", "$comment", "$defs", "definitions", "discriminator", "$schema", "$id"];

function types(schema) {
  if (schema.type === undefined) return undefined;
  return Array.isArray(schema.type) ? schema.type : [schema.type];
}

// Two schemas as one, or null when they disagree in a way a single form cannot show. Properties
// and items that both sides constrain become an allOf of their own, merged when they are rendered.
function merge(a, b) {
  const out = { ...a };
  for (const [key, value] of Object.entries(b)) {
    if (!(key in out)) {
      out[key] = value;
    } else if (ANNOTATIONS.includes(key)) {
      continue;
    } else if (key === "properties") {
      const props = { ...out.properties };
      for (const [name, sub] of Object.entries(value)) props[name] = name in props ? { allOf: [props[name], sub] } : sub;
      out.properties = props;
    } else if (key === "items") {
      out.items = { allOf: [out.items, value] };
    } else if (key === "required") {
      out.required = [...new Set([...out.required, ...value])];
    } else if (key === "type") {
      const left = types(out);
      const right = types(b);
      const both = left.filter((t) => right.includes(t) || (t === "integer" && right.includes("number")))
        .concat(right.filter((t) => t === "integer" && left.includes("number")));
      if (both.length === 0) return null;
      out.type = both.length === 1 ? both[0] : [...new Set(both)];
    } else if (key === "enum") {
      out.enum = out.enum.filter((option) => value.some((other) => sameJson(option, other)));
    } else if (LOWER_BOUNDS.includes(key) && typeof value === "number") {
      out[key] = Math.max(out[key], value);
    } else if (UPPER_BOUNDS.includes(key) && typeof value === "number") {
      out[key] = Math.min(out[key], value);
    } else if (!sameJson(out[key], value)) {
      return null;
    }
  }
  return out;
}

// The schema to render, with references followed and allOf merged: {schema, ctx}, or {schema, ctx,
// json} with the reason a JSON box stands in. ctx is {root, refs}: the schema references point
// into, and the references followed on the way here (one met again is a cycle).
function expand(schema, ctx) {
  if (schema === true || schema === undefined) return { schema: {}, ctx };
  if (!isObject(schema)) return { schema: {}, ctx, json: "This schema accepts no value." };
  for (let depth = 0; schema.$ref !== undefined || schema.allOf !== undefined; depth++) {
    if (depth > 50) return { schema, ctx, json: "This schema nests too deeply for a form." };
    if (schema.$ref !== undefined) {
      const { $ref: ref, ...siblings } = schema;
      if (ctx.refs.includes(ref)) return { schema: siblings, ctx, json: "This schema contains itself: edit this part as JSON." };
      const target = lookup(ctx.root, ref);
      if (!isObject(target)) return { schema: siblings, ctx, json: `The reference ${ref} is not in this schema: edit as JSON.` };
      ctx = { ...ctx, refs: [...ctx.refs, ref] };
      // Siblings of $ref apply too (Draft 2020-12); their title and description speak for the field.
      schema = merge(siblings, target);
      if (schema === null) return { schema: siblings, ctx, json: "This schema's parts disagree: edit as JSON." };
      continue;
    }
    const { allOf, ...rest } = schema;
    let merged = rest;
    for (const part of allOf) {
      const next = expand(part, ctx);
      merged = next.json ? null : merge(merged, next.schema);
      if (merged === null) return { schema: rest, ctx, json: "This schema's parts (allOf) cannot be merged into one form: edit as JSON." };
      ctx = next.ctx;
    }
    schema = merged;
  }
  return { schema, ctx };
}

function mainType(schema) {
  const list = types(schema);
  if (list) return list.find((t) => t !== "null");
  if (schema.enum || "const" in schema) return "enum";
  if (schema.properties) return "object";
  if (schema.items) return "array";
  return undefined;
}

function nullable(schema) {
  return (types(schema) || []).includes("null");
}

// The options of a single choice as {value, title}: `const`, `enum` (with the older `enumNames`), or
// `oneOf` / `anyOf` of `{const, title}` (MCP's titled enums). Null when the schema is no choice.
function choices(schema) {
  const titled = schema.oneOf || schema.anyOf;
  if (Array.isArray(titled) && titled.length > 0 && titled.every((option) => isObject(option) && "const" in option)) {
    return titled.map((option) => ({ value: option.const, title: String(option.title ?? JSON.stringify(option.const)) }));
  }
  if ("const" in schema) return [{ value: schema.const, title: typeof schema.const === "string" ? schema.const : JSON.stringify(schema.const) }];
  if (Array.isArray(schema.enum)) {
    const names = Array.isArray(schema.enumNames) ? schema.enumNames : [];
    return schema.enum.map((option, i) => ({ value: option, title: String(names[i] ?? (typeof option === "string" ? option : JSON.stringify(option))) }));
  }
  return null;
}

const isNullSchema = (schema) => isObject(schema) && (schema.type === "null" || (Array.isArray(schema.type) && schema.type.length === 1 && schema.type[0] === "null") || schema.const === null);

// -- constraints: shown beside the field, checked before sending ------------------------------

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

function range(min, max, word) {
  if (min != null && max != null) return min === max ? plural(min, word) : `${min} to ${plural(max, word)}`;
  if (min != null) return `at least ${plural(min, word)}`;
  if (max != null) return `at most ${plural(max, word)}`;
  return null;
}

// Draft 4 wrote exclusive bounds as booleans beside minimum/maximum; Draft 2020-12 as numbers.
function bounds(schema) {
  const out = { min: schema.minimum, max: schema.maximum, xmin: schema.exclusiveMinimum, xmax: schema.exclusiveMaximum };
  if (out.xmin === true) [out.xmin, out.min] = [out.min, undefined];
  if (out.xmax === true) [out.xmax, out.max] = [out.max, undefined];
  if (typeof out.xmin !== "number") out.xmin = undefined;
  if (typeof out.xmax !== "number") out.xmax = undefined;
  return out;
}

function describeConstraints(schema, type) {
  const parts = [];
  if (type === "string") {
    parts.push(range(schema.minLength, schema.maxLength, "character"));
    if (schema.pattern) parts.push(`matches ${schema.pattern}`);
    if (schema.format) parts.push(`format: ${schema.format}`);
  } else if (type === "number" || type === "integer") {
    const b = bounds(schema);
    if (type === "integer") parts.push("a whole number");
    if (b.min != null) parts.push(`≥ ${b.min}`);
    if (b.xmin != null) parts.push(`> ${b.xmin}`);
    if (b.max != null) parts.push(`≤ ${b.max}`);
    if (b.xmax != null) parts.push(`< ${b.xmax}`);
    if (schema.multipleOf != null) parts.push(`a multiple of ${schema.multipleOf}`);
  } else if (type === "array") {
    parts.push(range(schema.minItems, schema.maxItems, "item"));
    if (schema.uniqueItems) parts.push("no duplicates");
  } else if (type === "enum") {
    const options = choices(schema) || [];
    if (options.length > 1) parts.push(`one of ${options.length} values`);
  }
  return parts.filter(Boolean).join(" · ");
}

const EMAIL = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;
// The checks the portal makes of an elicitation's answer (sessions/mcp/elicitation.py): loose on purpose.
const FORMATS = {
  email: (v) => EMAIL.test(v) || "This is not an email address.",
  uri: (v) => /^[A-Za-z][A-Za-z0-9+.-]*:[^\s]+$/.test(v) || "This is not an absolute URI (it needs a scheme, like https:).",
  date: (v) => (/^\d{4}-\d{2}-\d{2}$/.test(v) && !Number.isNaN(Date.parse(v))) || "This is not a date (YYYY-MM-DD).",
  "date-time": (v) => !Number.isNaN(Date.parse(v)) || "This is not a date and time.",
};

function patternOf(schema) {
  if (typeof schema.pattern !== "string") return null;
  try {
    // Like Python's re.search: anywhere in the value unless the pattern anchors itself.
    return new RegExp(schema.pattern, "u");
  } catch {
    return null; // a pattern JavaScript cannot read is left to the portal
  }
}

function checkString(schema, value) {
  const problems = [];
  const length = [...value].length; // code points, as JSON Schema counts
  if (schema.minLength != null && length < schema.minLength) problems.push(`At least ${plural(schema.minLength, "character")} (this has ${length}).`);
  if (schema.maxLength != null && length > schema.maxLength) problems.push(`At most ${plural(schema.maxLength, "character")} (this has ${length}).`);
  const pattern = patternOf(schema);
  if (pattern && !pattern.test(value)) problems.push(`Does not match the pattern ${schema.pattern}.`);
  const format = FORMATS[schema.format]?.(value);
  if (typeof format === "string") problems.push(format);
  return problems;
}

// JSON has no Infinity: JSON.stringify would send 1e400 as null, and the server would say "None is not a number".
export const NOT_FINITE = "Not a finite number: too large for JSON.";

// Each number in `value` that JSON cannot carry (1e400 parses as Infinity), as {path, message}.
export function nonFinite(value, path = []) {
  if (typeof value === "number") return Number.isFinite(value) ? [] : [{ path, message: NOT_FINITE }];
  if (value && typeof value === "object") {
    return Object.entries(value).flatMap(([key, item]) => nonFinite(item, [...path, Array.isArray(value) ? Number(key) : key]));
  }
  return [];
}

function checkNumber(schema, type, value) {
  if (!Number.isFinite(value)) return [NOT_FINITE];
  const problems = [];
  const b = bounds(schema);
  if (type === "integer" && !Number.isInteger(value)) problems.push("Must be a whole number.");
  if (b.min != null && value < b.min) problems.push(`Must be at least ${b.min}.`);
  if (b.xmin != null && value <= b.xmin) problems.push(`Must be greater than ${b.xmin}.`);
  if (b.max != null && value > b.max) problems.push(`Must be at most ${b.max}.`);
  if (b.xmax != null && value >= b.xmax) problems.push(`Must be less than ${b.xmax}.`);
  if (schema.multipleOf && !Number.isInteger(value / schema.multipleOf)) problems.push(`Must be a multiple of ${schema.multipleOf}.`);
  return problems;
}

function checkItems(schema, items) {
  const problems = [];
  if (schema.minItems != null && items.length < schema.minItems) problems.push(`At least ${plural(schema.minItems, "item")}.`);
  if (schema.maxItems != null && items.length > schema.maxItems) problems.push(`At most ${plural(schema.maxItems, "item")}.`);
  if (schema.uniqueItems && new Set(items.map((item) => JSON.stringify(item))).size !== items.length) problems.push("The items must all differ.");
  return problems;
}

// -- the pieces of a field -----------------------------------------------------------------

function labelText(text, required) {
  return [h("span", { class: "label-text", text }), required ? h("span", { class: "required", "aria-hidden": "true", text: " *" }) : null];
}

// The label, control, constraints, description and error slot of one field.
function wrap(path, text, required, control, schema, hint) {
  const id = control.id;
  const notes = [];
  if (hint) notes.push(h("div", { class: "constraints", id: `${id}-limits`, text: hint }));
  if (schema.description) notes.push(h("div", { class: "help", id: `${id}-help`, text: schema.description }));
  if (notes.length) control.setAttribute("aria-describedby", notes.map((note) => note.id).join(" "));
  return h("div", { class: "field", "data-path": JSON.stringify(path) },
    h("label", { for: id }, labelText(text, required)), control, notes, h("div", { class: "error", role: "alert" }));
}

// Array items and a variant's own field are required by their place, not by the person: no star.
const marked = (o) => o.required && !o.unmarked;

function report(errors, path, problems) {
  for (const message of problems) errors.push({ path, message });
}

// -- the fields --------------------------------------------------------------------------------

// opts: {name, label, path, required, initial, ctx}; label is the text shown (array items are numbered).
export function renderField(raw, opts) {
  const expanded = expand(raw, opts.ctx);
  const schema = expanded.schema;
  const o = { ...opts, ctx: expanded.ctx, label: opts.label ?? schema.title ?? opts.name ?? "value" };
  const value = o.initial !== undefined ? o.initial : schema.default;
  if (expanded.json) return renderJson(schema, o, value, expanded.json);

  const variants = schema.oneOf || schema.anyOf;
  const list = types(schema) || [];
  if (!choices(schema) && Array.isArray(variants)) return renderVariants(schema, o, value);
  if (list.filter((t) => t !== "null").length > 1) {
    // ["string", "number"]: one variant per type.
    const { type, ...rest } = schema;
    return renderVariants({ ...rest, anyOf: type.map((t) => ({ type: t })) }, o, value);
  }
  if (nullable(schema) && !choices(schema)) {
    return renderNullable({ ...schema, type: list.find((t) => t !== "null") }, o, value);
  }
  return renderPlain(schema, o, value);
}

function renderPlain(schema, o, value) {
  const type = mainType(schema);
  const path = o.path;
  const single = choices(schema);
  if (single) return renderChoice(schema, single, o, value);
  const multiple = type === "array" && isObject(schema.items) ? choices(expand(schema.items, o.ctx).schema) : null;
  if (multiple) return renderMultiSelect(schema, multiple, o, value);
  if (schema.not !== undefined || schema.if !== undefined) return renderJson(schema, o, value);

  if (type === "boolean") {
    const id = fieldId();
    const box = h("input", { id, type: "checkbox", checked: value === true });
    const el = h("div", { class: "field", "data-path": JSON.stringify(path) },
      h("label", { for: id, class: "checkbox" }, box, " ", labelText(o.label, false)),
      schema.description ? h("div", { class: "help", text: schema.description }) : null, h("div", { class: "error", role: "alert" }));
    return { el, read: () => box.checked };
  }

  if (type === "number" || type === "integer") {
    const id = fieldId();
    const input = h("input", { id, type: "number", step: type === "integer" ? "1" : "any", value: typeof value === "number" ? value : null });
    return {
      el: wrap(path, o.label, marked(o), input, schema, describeConstraints(schema, type)),
      read: (at, errors) => {
        if (input.validity.badInput) {
          errors.push({ path: at, message: "This is not a number." });
          return ABSENT;
        }
        if (input.value.trim() === "") return ABSENT;
        const number = Number(input.value);
        report(errors, at, checkNumber(schema, type, number));
        return number;
      },
    };
  }

  if (type === "string") {
    const id = fieldId();
    // No maxlength attribute: the browser would cut what is typed past it without a word.
    const inputType = { date: "date", "date-time": "datetime-local" }[schema.format] || "text";
    const long = (schema.maxLength ?? 0) > 200 || schema.format === "textarea";
    const input = long
      ? h("textarea", { id, rows: 4 })
      : h("input", { id, type: inputType, inputmode: { email: "email", uri: "url" }[schema.format] || null });
    if (typeof value === "string") input.value = inputType === "datetime-local" ? value.slice(0, 16) : value;
    return {
      el: wrap(path, o.label, marked(o), input, schema, describeConstraints(schema, type)),
      read: (at, errors) => {
        // An empty field is left out; if it was required, the portal's check names it.
        if (input.value === "") return ABSENT;
        const text = inputType === "datetime-local" ? new Date(input.value).toISOString() : input.value;
        report(errors, at, checkString(schema, text));
        return text;
      },
    };
  }

  if (type === "object" && isObject(schema.properties)) return renderObject(schema, o, value);
  if (type === "array" && isObject(schema.items) && schema.prefixItems === undefined) return renderArray(schema, o, value);
  return renderJson(schema, o, value);
}

function renderChoice(schema, options, o, value) {
  const id = fieldId();
  if (options.length === 1 && o.required) {
    // A required const (a variant's discriminator, a Literal): shown, always sent, not edited.
    const shown = h("input", { id, readonly: true, class: "fixed", value: options[0].title });
    return { el: wrap(o.path, o.label, marked(o), shown, schema, null), read: () => options[0].value };
  }
  // No option is picked for the person: a required choice without a default starts empty.
  const select = h("select", { id },
    o.required && value !== undefined ? null : h("option", { value: "", text: "—" }),
    options.map((option, i) => h("option", { value: String(i), text: option.title, selected: sameJson(value, option.value) })));
  return {
    el: wrap(o.path, o.label, marked(o), select, schema, describeConstraints(schema, "enum")),
    read: () => (select.value === "" ? ABSENT : options[Number(select.value)].value),
  };
}

function renderMultiSelect(schema, options, o, value) {
  const chosen = Array.isArray(value) ? value : [];
  const boxes = options.map((option) => {
    const box = h("input", { type: "checkbox", checked: chosen.some((v) => sameJson(v, option.value)) });
    return { box, option, label: h("label", { class: "checkbox" }, box, " ", option.title) };
  });
  const hint = describeConstraints(schema, "array");
  const el = h("fieldset", { class: "multi-select", "data-path": JSON.stringify(o.path) },
    h("legend", {}, labelText(o.label, marked(o))),
    hint ? h("div", { class: "constraints", text: hint }) : null,
    boxes.map((b) => b.label),
    schema.description ? h("div", { class: "help", text: schema.description }) : null,
    h("div", { class: "error", role: "alert" }));
  return {
    el,
    read: (at, errors) => {
      const out = boxes.filter((b) => b.box.checked).map((b) => b.option.value);
      if (out.length === 0 && !o.required) return ABSENT;
      report(errors, at, checkItems(schema, out));
      return out;
    },
  };
}

function renderObject(schema, o, value) {
  const needed = new Set(schema.required || []);
  const initial = isObject(value) ? value : {};
  const children = Object.entries(schema.properties).map(([key, sub]) => [key, renderField(sub, {
    name: key, path: [...o.path, key], required: needed.has(key), initial: initial[key], ctx: o.ctx,
  })]);
  const body = children.map(([, field]) => field.el);
  const el = o.bare
    ? h("div", { class: "object-root", "data-path": JSON.stringify(o.path) }, body)
    : h("fieldset", { "data-path": JSON.stringify(o.path) }, h("legend", {}, labelText(o.label, marked(o))),
      schema.description ? h("div", { class: "help", text: schema.description }) : null, body, h("div", { class: "error", role: "alert" }));
  return {
    el,
    read: (at, errors) => {
      const out = {};
      for (const [key, field] of children) {
        const v = field.read([...at, key], errors);
        if (v !== ABSENT) out[key] = v;
      }
      if (!o.bare && !o.required && Object.keys(out).length === 0) return ABSENT;
      return out;
    },
  };
}

function renderArray(schema, o, value) {
  const list = h("ol", { class: "array-items" });
  const items = [];
  const base = o.label;
  const hint = describeConstraints(schema, "array");
  const fieldset = h("fieldset", { "data-path": JSON.stringify(o.path) }, h("legend", {}, labelText(base, marked(o))),
    hint ? h("div", { class: "constraints", text: hint }) : null,
    schema.description ? h("div", { class: "help", text: schema.description }) : null, list);
  const here = () => JSON.parse(fieldset.dataset.path);

  // After a removal the items below it move up: their numbers and their paths follow.
  function renumber() {
    const depth = here().length;
    items.forEach((entry, i) => {
      entry.li.querySelector(".label-text").textContent = `${base} ${i + 1}`;
      entry.remove.textContent = `Remove ${base} ${i + 1}`;
      for (const el of [entry.li, ...entry.li.querySelectorAll("[data-path]")]) {
        if (!el.dataset.path) continue;
        const path = JSON.parse(el.dataset.path);
        path[depth] = i;
        el.dataset.path = JSON.stringify(path);
      }
    });
  }

  function add(initial) {
    const index = items.length;
    const field = renderField(schema.items, { name: base, label: `${base} ${index + 1}`, path: [...here(), index], required: true, unmarked: true, initial, ctx: o.ctx });
    const entry = { field };
    entry.remove = h("button", { type: "button", class: "link", text: `Remove ${base} ${index + 1}`, onclick: () => {
      items.splice(items.indexOf(entry), 1);
      entry.li.remove();
      renumber();
    } });
    entry.li = h("li", {}, field.el, entry.remove);
    items.push(entry);
    list.append(entry.li);
    return field;
  }
  (Array.isArray(value) ? value : []).forEach(add);
  fieldset.append(h("button", { type: "button", text: `Add ${base} item`, onclick: () => {
    add(undefined).el.querySelector("input, select, textarea")?.focus();
  } }), h("div", { class: "error", role: "alert" }));
  return {
    el: fieldset,
    read: (at, errors) => {
      const out = items.map((entry, i) => entry.field.read([...at, i], errors)).filter((v) => v !== ABSENT);
      if (out.length === 0 && !o.required) return ABSENT;
      report(errors, at, checkItems(schema, out));
      return out;
    },
  };
}

// "Or null": the field as usual, and a toggle that sends null instead.
function renderNullable(schema, o, value) {
  const inner = renderField(schema, { ...o, initial: value === null ? undefined : value });
  const holder = h("fieldset", { class: "bare" }, inner.el);
  const toggle = h("input", { type: "checkbox", checked: o.initial === null, "aria-label": `${o.label}: send null` });
  const sync = () => { holder.disabled = toggle.checked; };
  toggle.addEventListener("change", sync);
  sync();
  const el = h("div", { class: "nullable" }, holder, h("label", { class: "checkbox null-toggle" }, toggle, " null"));
  return { el, read: (at, errors) => (toggle.checked ? null : inner.read(at, errors)) };
}

// The name of each variant: its title, its const, its discriminator's const, or its type.
function variantLabel(variant, discriminator, index, ctx) {
  if (variant.title) return String(variant.title);
  if ("const" in variant) return JSON.stringify(variant.const);
  const tag = discriminator && variant.properties?.[discriminator];
  if (isObject(tag)) {
    const fixed = expand(tag, ctx).schema;
    if ("const" in fixed) return String(fixed.const);
    if (Array.isArray(fixed.enum) && fixed.enum.length === 1) return String(fixed.enum[0]);
  }
  const type = mainType(variant);
  if (type === "array" && isObject(variant.items) && variant.items.type) return `list of ${variant.items.type}`;
  return type || `option ${index + 1}`;
}

function constOf(schema) {
  if (!isObject(schema)) return undefined;
  if ("const" in schema) return { value: schema.const };
  if (Array.isArray(schema.enum) && schema.enum.length === 1) return { value: schema.enum[0] };
  return undefined;
}

// The property every object variant fixes to its own value (`kind: {const: "circle"}`), if any.
function findDiscriminator(schema, variants, ctx) {
  if (typeof schema.discriminator?.propertyName === "string") return schema.discriminator.propertyName;
  const objects = variants.filter((v) => isObject(v.properties));
  if (objects.length !== variants.length || objects.length < 2) return null;
  for (const name of Object.keys(objects[0].properties)) {
    const values = objects.map((v) => constOf(v.properties[name] && expand(v.properties[name], ctx).schema));
    if (values.every(Boolean) && new Set(values.map((v) => JSON.stringify(v.value))).size === values.length) return name;
  }
  return null;
}

function jsonType(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (Number.isInteger(value)) return "integer";
  return typeof value;
}

// Which variant an initial value belongs to: by its discriminator, its const, or its type.
function matchVariant(variants, discriminator, value, ctx) {
  if (value === undefined) return -1;
  return variants.findIndex((v) => {
    if ("const" in v) return sameJson(v.const, value);
    if (discriminator && isObject(value) && v.properties?.[discriminator]) {
      const fixed = constOf(expand(v.properties[discriminator], ctx).schema);
      return fixed !== undefined && sameJson(fixed.value, value[discriminator]);
    }
    const t = mainType(v);
    const actual = jsonType(value);
    return t === actual || (t === "number" && actual === "integer") || (t === "object" && actual === "object" && Object.keys(value).every((key) => key in (v.properties || {})));
  });
}

// oneOf / anyOf: a picker of the variants and the form of the one picked. The parent's own
// keywords (an object's shared properties, a title) apply to every variant, merged in.
function renderVariants(schema, o, value) {
  const { oneOf, anyOf, ...parent } = schema;
  const raw = oneOf || anyOf;
  const nullAllowed = raw.some((v) => isNullSchema(expand(v, o.ctx).schema)) || nullable(parent);
  const { title: _title, description: _description, default: _default, ...shared } = parent;
  const variants = [];
  for (const v of raw) {
    const expanded = expand(v, o.ctx);
    if (isNullSchema(expanded.schema)) continue;
    const merged = expanded.json ? null : merge(expanded.schema, shared);
    variants.push({ schema: merged ?? expanded.schema, ctx: expanded.ctx, json: expanded.json || (merged ? null : "This variant disagrees with its parent schema: edit as JSON.") });
  }
  if (variants.length === 1 && nullAllowed) {
    // anyOf [X, null]: X with a null toggle, not a picker of one.
    const lone = { ...variants[0].schema };
    if (parent.description !== undefined) lone.description = parent.description;
    if (parent.default !== undefined) lone.default = parent.default;
    return renderNullable(lone, { ...o, ctx: variants[0].ctx }, value);
  }
  const discriminator = findDiscriminator(schema, variants.map((v) => v.schema), o.ctx);
  const labels = variants.map((v, i) => variantLabel(v.schema, discriminator, i, v.ctx));
  const id = fieldId();
  // An optional field starts with nothing picked, and sends nothing until a variant is.
  const blank = !o.required && value === undefined;
  const select = h("select", { id, "aria-label": `${o.label} variant` },
    blank ? h("option", { value: "", text: "—" }) : null,
    labels.map((label, i) => h("option", { value: String(i), text: label })),
    nullAllowed ? h("option", { value: "null", text: "null" }) : null);
  const matched = blank ? "" : value === null && nullAllowed ? "null"
    : String(Math.max(0, matchVariant(variants.map((v) => v.schema), discriminator, value, o.ctx)));
  select.value = matched;
  const body = h("div", { class: "variant-body" });
  const rendered = new Map();
  const el = h(o.bare ? "div" : "fieldset", { class: o.bare ? "variants object-root" : "variants", "data-path": JSON.stringify(o.path) },
    o.bare ? null : h("legend", {}, labelText(o.label, marked(o))),
    h("div", { class: "variant-picker" }, h("label", { for: id, text: "Variant" }), select),
    parent.description ? h("div", { class: "help", text: parent.description }) : null,
    body, h("div", { class: "error", role: "alert" }));
  const here = () => JSON.parse(el.dataset.path);

  // Each variant is rendered once, when first picked, and kept: switching back keeps what was typed.
  function current() {
    if (select.value === "null") return null;
    if (select.value === "") return undefined;
    const index = Number(select.value);
    if (!rendered.has(index)) {
      const v = variants[index];
      const initial = String(index) === matched ? value : undefined;
      const opts = { name: o.name, label: labels[index], path: here(), required: true, unmarked: true, initial, ctx: v.ctx };
      const isObjectVariant = !v.json && mainType(v.schema) === "object" && isObject(v.schema.properties);
      rendered.set(index, v.json ? renderJson(v.schema, opts, initial, v.json) : isObjectVariant ? renderObject(v.schema, { ...opts, bare: true }) : renderField(v.schema, opts));
    }
    return rendered.get(index);
  }
  function show() {
    const field = current();
    body.replaceChildren(...(field ? [field.el] : []));
  }
  select.addEventListener("change", show);
  show();
  return {
    el,
    read: (at, errors) => {
      const field = current();
      if (field === null) return null;
      if (field === undefined) return ABSENT;
      return field.read(at, errors);
    },
  };
}

function renderJson(schema, o, value, reason) {
  const id = fieldId();
  const area = h("textarea", { id, rows: 4, spellcheck: "false", class: "json" });
  if (value !== undefined) area.value = JSON.stringify(value, null, 2);
  const el = wrap(o.path, o.label, marked(o), area, schema, reason || "Edit as JSON");
  el.querySelector("label").append(h("span", { class: "muted small", text: " (JSON)" }));
  return {
    el,
    read: (at, errors) => {
      if (area.value.trim() === "") return ABSENT;
      try {
        return JSON.parse(area.value);
      } catch {
        errors.push({ path: at, message: "This is not valid JSON." });
        return ABSENT;
      }
    },
  };
}

// The form for a whole schema: read() gives the value or throws a FieldError holding every error;
// value() gives what is there, errors or not (for switching to the JSON editor).
export function buildForm(schema, initial) {
  const root = isObject(schema) ? schema : {};
  const ctx = { root, refs: [] };
  const field = renderField({ type: "object", ...root }, { name: "", label: root.title || "Arguments", path: [], required: true, initial, bare: true, ctx });
  const collect = () => {
    const errors = [];
    const value = field.read([], errors);
    return { value: value === ABSENT ? {} : value, errors };
  };
  return {
    el: field.el,
    read() {
      const { value, errors } = collect();
      if (errors.length) throw new FieldError(errors[0].path, errors[0].message, errors);
      return value;
    },
    value: () => collect().value,
  };
}

// Show {path, message} errors beside their fields; what matches no field goes to `fallback`.
export function showErrors(container, errors, fallback) {
  for (const el of container.querySelectorAll(".error")) el.textContent = "";
  for (const el of container.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
  const unplaced = [];
  const fields = [...container.querySelectorAll("[data-path]")];
  for (const error of errors) {
    let path = error.path;
    let field = null;
    while (field === null) {
      const wanted = JSON.stringify(path);
      // The innermost element with that path: a variant's own field rather than its picker.
      field = fields.findLast((el) => el.dataset.path === wanted && el.isConnected) || null;
      if (field || path.length === 0) break;
      path = path.slice(0, -1);
    }
    if (!field || path.length === 0) {
      unplaced.push(error.path.length ? `${error.path.join(".")}: ${error.message}` : error.message);
      continue;
    }
    const slot = [...field.children].reverse().find((el) => el.classList.contains("error"));
    if (slot) slot.textContent = slot.textContent ? `${slot.textContent}\n${error.message}` : error.message;
    field.querySelector("input, select, textarea")?.setAttribute("aria-invalid", "true");
  }
  fallback.textContent = unplaced.join("\n");
}
