// The native reader of runs of plain content events, an optional twin of the
// regular expressions in src/upstream/content-runs.ts: it accepts exactly the
// events they accept and renders a run to the same text, on ASCII text only.
// It exists for speed: most of a streamed reply is such runs, and reading and
// rewriting them here costs the gateway's one JavaScript thread a fraction of
// what the regular-expression engine, the rope it returns and the string's
// encoding at the socket cost.
//
//   scan(bytes: Buffer, start, info: Float64Array(3)) -> string | null
//     The run at `start` of the body's bytes (ASCII), read where they lie:
//     its pieces' JSON string literals, each followed by a NUL (no literal
//     holds a raw control character), and in `info` how many bytes it spans,
//     its choice index and its pieces.
//   render(literals, before, after) -> string
//     Every piece between `before` and `after` (any strings), all joined.
//
// The reply's bytes are read as the network delivered them: a copy of their
// text, a slice at a time, cost the gateway more than the scan. What comes
// back is strings, not Buffers: a string is allocated in V8's young
// generation for almost nothing and written to a socket with no further
// copy, where a Buffer of a reply's size costs more to allocate and collect
// than the whole rewrite.
#include <node_api.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace {

// The literals scan collects and what render copies in and builds, kept
// between calls so that their memory is reused; one set per thread, as each
// thread that loads the module calls it on its own.
// A function takes a reference to each it uses once: in a shared library,
// every use of a thread_local looks its address up again.
thread_local std::string literals;
thread_local std::string before_bytes;
thread_local std::string after_bytes;
thread_local std::string rendered;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
/** An escape of one character after the backslash: \" \\ \/ \b \f \n \r \t. */
bool is_short_escape(char c) {
  return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't';
}

class Cursor {
 public:
  Cursor(const char* at, const char* end) : at_(at), end_(end) {}
  const char* at() const { return at_; }
  const char* end() const { return end_; }

  template <size_t N>
  bool literal(const char (&text)[N]) {
    return bytes(text, N - 1);
  }

  bool bytes(const char* text, size_t n) {
    if (static_cast<size_t>(end_ - at_) < n || std::memcmp(at_, text, n) != 0) return false;
    at_ += n;
    return true;
  }

  /** The rest of a string with no quote or backslash in it (an id, a model), its closing quote included. */
  bool plain_string_rest() {
    for (; at_ < end_; at_++) {
      if (*at_ == '"') {
        at_++;
        return true;
      }
      if (*at_ == '\\') return false;
    }
    return false;
  }

  bool digits() {
    const char* start = at_;
    while (at_ < end_ && is_digit(*at_)) at_++;
    return at_ > start;
  }

  /** A JSON string literal with at least one character in it. */
  bool json_string() {
    if (at_ >= end_ || *at_ != '"') return false;
    const char* first = ++at_;
    while (at_ < end_) {
      const unsigned char c = static_cast<unsigned char>(*at_);
      if (c == '"') {
        if (at_ == first) return false;
        at_++;
        return true;
      }
      if (c < 0x20) return false;
      if (c != '\\') {
        at_++;
        continue;
      }
      if (end_ - at_ < 2) return false;
      const char escaped = at_[1];
      if (escaped == 'u') {
        if (end_ - at_ < 6 || !is_hex(at_[2]) || !is_hex(at_[3]) || !is_hex(at_[4]) || !is_hex(at_[5])) return false;
        at_ += 6;
      } else if (is_short_escape(escaped)) {
        at_ += 2;
      } else {
        return false;
      }
    }
    return false;
  }

 private:
  const char* at_;
  const char* end_;
};

/** Where one event's parts lie, and its choice index as written. */
struct Event {
  const char* start;
  const char* index;
  size_t index_length;
  const char* literal;
  const char* literal_end;
  const char* end;
};

/**
 * One plain content event at the cursor, as the regular expressions define
 * it; after a run's `first` event, with the same choice index as written.
 */
bool read_event(Cursor c, const Event* first, Event& e) {
  e.start = c.at();
  if (!c.literal("data: {\"id\":\"") || !c.plain_string_rest()) return false;
  if (!c.literal(",\"object\":\"chat.completion.chunk\",\"created\":") || !c.digits()) return false;
  if (!c.literal(",\"model\":\"") || !c.plain_string_rest() || !c.literal(",")) return false;
  // The fields CHUNK_HEAD and CHUNK_TAIL admit and Parley drops, any number of each, in any order.
  while (c.literal("\"service_tier\":") || c.literal("\"system_fingerprint\":")) {
    if (!c.literal("null") && !(c.literal("\"") && c.plain_string_rest())) return false;
    if (!c.literal(",")) return false;
  }
  if (!c.literal("\"choices\":[{\"index\":")) return false;
  e.index = c.at();
  if (!c.digits()) return false;
  e.index_length = c.at() - e.index;
  if (first && (e.index_length != first->index_length || std::memcmp(e.index, first->index, e.index_length) != 0)) return false;
  if (!c.literal(",\"delta\":{\"content\":")) return false;
  e.literal = c.at();
  if (!c.json_string()) return false;
  e.literal_end = c.at();
  if (!c.literal("},\"logprobs\":null,\"finish_reason\":null")) return false;
  while (c.literal(",\"stop_reason\":null") || c.literal(",\"matched_stop\":null") || c.literal(",\"token_ids\":null")) continue;
  if (!c.literal("}]")) return false;
  for (;;) {
    if (c.literal(",\"usage\":null") || c.literal(",\"prompt_token_ids\":null")) continue;
    if (!c.literal(",\"obfuscation\":\"")) break;
    if (!c.plain_string_rest()) return false;
  }
  if (!c.literal("}\n\n")) return false;
  e.end = c.at();
  return true;
}

/**
 * The next event of a run whose first event is `first`. An upstream frames
 * every piece of a reply alike, so the framing is first compared whole with
 * the first event's (already checked); only an event framed otherwise is
 * read part by part.
 */
bool read_next_event(Cursor c, const Event& first, Event& e) {
  const char* start = c.at();
  if (c.bytes(first.start, first.literal - first.start)) {
    const char* literal = c.at();
    if (c.json_string()) {
      const char* literal_end = c.at();
      if (c.bytes(first.literal_end, first.end - first.literal_end)) {
        e = Event{start, first.index, first.index_length, literal, literal_end, c.at()};
        return true;
      }
    }
  }
  return read_event(Cursor(start, c.end()), &first, e);
}

napi_value null_value(napi_env env) {
  napi_value result;
  napi_get_null(env, &result);
  return result;
}

/** Copies a string's text into `out`: Latin-1 for literals (ASCII by contract), UTF-8 for framing. */
bool copy_string(napi_env env, napi_value value, std::string& out, bool latin1) {
  size_t length;
  auto get = latin1 ? napi_get_value_string_latin1 : napi_get_value_string_utf8;
  if (get(env, value, nullptr, 0, &length) != napi_ok) return false;
  out.resize(length + 1);
  if (get(env, value, out.data(), length + 1, &length) != napi_ok) return false;
  out.resize(length);
  return true;
}

napi_value Scan(napi_env env, napi_callback_info call) {
  size_t argc = 3;
  napi_value argv[3];
  napi_get_cb_info(env, call, &argc, argv, nullptr, nullptr);
  bool is_buffer = false;
  void* bytes;
  size_t length;
  double start;
  double* info;
  size_t info_length;
  napi_typedarray_type type;
  if (argc < 3 || napi_is_buffer(env, argv[0], &is_buffer) != napi_ok || !is_buffer ||
      napi_get_buffer_info(env, argv[0], &bytes, &length) != napi_ok || napi_get_value_double(env, argv[1], &start) != napi_ok ||
      !(start >= 0 && start <= static_cast<double>(length)) ||
      napi_get_typedarray_info(env, argv[2], &type, &info_length, reinterpret_cast<void**>(&info), nullptr, nullptr) != napi_ok ||
      type != napi_float64_array || info_length < 3) {
    napi_throw_type_error(env, nullptr, "scan(bytes: Buffer, start: number, info: Float64Array(3))");
    return nullptr;
  }
  const char* text = static_cast<const char*>(bytes) + static_cast<size_t>(start);
  const char* text_end = static_cast<const char*>(bytes) + length;
  std::string& out = literals;
  Event first;
  if (!read_event(Cursor(text, text_end), nullptr, first)) return null_value(env);
  out.assign(first.literal, first.literal_end);
  out.push_back('\0');
  double pieces = 1;
  const char* end = first.end;
  for (Event e; read_next_event(Cursor(end, text_end), first, e); pieces++) {
    out.append(e.literal, e.literal_end);
    out.push_back('\0');
    end = e.end;
  }
  double index = 0;
  for (size_t i = 0; i < first.index_length; i++) index = index * 10 + (first.index[i] - '0');
  info[0] = static_cast<double>(end - text);
  info[1] = index;
  info[2] = pieces;
  napi_value result;
  napi_create_string_latin1(env, out.data(), out.size(), &result);
  return result;
}

bool is_ascii(const std::string& text) {
  for (unsigned char c : text) {
    if (c >= 0x80) return false;
  }
  return true;
}

napi_value Render(napi_env env, napi_callback_info call) {
  size_t argc = 3;
  napi_value argv[3];
  napi_get_cb_info(env, call, &argc, argv, nullptr, nullptr);
  if (argc < 3 || !copy_string(env, argv[0], literals, true) || !copy_string(env, argv[1], before_bytes, false) ||
      !copy_string(env, argv[2], after_bytes, false)) {
    napi_throw_type_error(env, nullptr, "render(literals: string, before: string, after: string)");
    return nullptr;
  }
  const std::string& pieces = literals;
  const std::string& before = before_bytes;
  const std::string& after = after_bytes;
  std::string& out = rendered;
  // Every piece ends in a NUL: the rendered size is known before anything is copied.
  const char* end = pieces.data() + pieces.size();
  const size_t count = std::count(pieces.begin(), pieces.end(), '\0');
  out.resize(pieces.size() - count + count * (before.size() + after.size()));
  char* to = out.data();
  for (const char* at = pieces.data(); at < end;) {
    const char* nul = static_cast<const char*>(std::memchr(at, 0, end - at));
    std::memcpy(to, before.data(), before.size());
    to += before.size();
    std::memcpy(to, at, nul - at);
    to += nul - at;
    std::memcpy(to, after.data(), after.size());
    to += after.size();
    at = nul + 1;
  }
  // The literals are ASCII; framing that is not is UTF-8 here.
  napi_value result;
  if (is_ascii(before) && is_ascii(after)) {
    napi_create_string_latin1(env, out.data(), out.size(), &result);
  } else {
    napi_create_string_utf8(env, out.data(), out.size(), &result);
  }
  return result;
}

napi_value Init(napi_env env, napi_value exports) {
  napi_value scan, render;
  napi_create_function(env, "scan", NAPI_AUTO_LENGTH, Scan, nullptr, &scan);
  napi_create_function(env, "render", NAPI_AUTO_LENGTH, Render, nullptr, &render);
  napi_set_named_property(env, exports, "scan", scan);
  napi_set_named_property(env, exports, "render", render);
  return exports;
}

}  // namespace

NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
