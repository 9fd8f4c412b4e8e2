// HTML by tagged template: every interpolated value is escaped unless it is
// already Html (made by this tag or marked `trusted`), so a name or a model's
// set-up text can never become markup.
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => ESCAPES[c]);

type Part = Html | string | number | boolean | null | undefined | Part[];

function render(value: Part): string {
  if (value === null || value === undefined || value === false) return '';
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(render).join('');
  return escapeHtml(String(value));
}

export function html(strings: TemplateStringsArray, ...values: Part[]): Html {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += render(values[i]) + strings[i + 1];
  return new Html(out);
}

/** Markup made by Parley itself (an SVG chart), never from user input. */
export const trusted = (text: string) => new Html(text);
