// The KEYS of one batch script, each key once, and where each is (counted
// from 1, as Lua does); the items go as one JSON text that names their keys
// by place (LUA_EACH_ITEM). A batch is mostly one account's or one
// endpoint's requests; sending every item's keys and arguments as command
// arguments of their own, rather than keys once and the items as one JSON
// text, cost the client some 40% more time per request in batches of 8.

export class BatchKeys {
  readonly list: string[] = [];
  private readonly places = new Map<string, number>();

  /** Where a group of keys that always go together starts; `first` names the group, `all` makes it (first first). */
  group(first: string, all: () => string[]): number {
    const known = this.places.get(first);
    if (known !== undefined) return known;
    const at = this.list.length + 1;
    this.places.set(first, at);
    this.list.push(...all());
    return at;
  }

  key(key: string): number {
    let at = this.places.get(key);
    if (at === undefined) {
      at = this.list.push(key);
      this.places.set(key, at);
    }
    return at;
  }
}

/**
 * Defines each_item(items_arg, group_size, more_keys, f), which calls f(K, A)
 * for each item of the JSON array in ARGV[items_arg]. An item is where its
 * group of `group_size` keys starts in KEYS, the places of its `more_keys`
 * other keys, then its arguments (A).
 */
export const LUA_EACH_ITEM = `
local function each_item(items_arg, group_size, more_keys, f)
  for _, item in ipairs(cjson.decode(ARGV[items_arg])) do
    local at, K = item[1], {}
    for i = 0, group_size - 1 do K[i + 1] = KEYS[at + i] end
    for i = 1, more_keys do K[group_size + i] = KEYS[item[1 + i]] end
    f(K, { unpack(item, 2 + more_keys) })
  end
end
`;
