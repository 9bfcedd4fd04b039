// The JSON reader (see json_read.h): a SAX handler builds the document so that duplicate keys,
// overflowing numbers and excessive nesting are caught with their position and JSON pointer.
#include "base/json_read.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <vector>

#include "base/mapped_file.h"

namespace specbed {

using nlohmann::json;

namespace {

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1,
// column 5: " prefix (SpecBed prints its own position).
std::string Reason(const std::string& what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find("] ");
    if (close != std::string::npos) s = s.substr(close + 2);
  }
  const size_t colon = s.find(": ");
  if (s.rfind("parse error", 0) == 0 && colon != std::string::npos) s = s.substr(colon + 2);
  return s;
}

// A char iterator that records the furthest position nlohmann's lexer has read, so SAX events
// (which carry no position) can name the line of a duplicate key.
class TrackingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* p, const char** furthest) : p_(p), furthest_(furthest) {}
  reference operator*() const {
    if (p_ > *furthest_) *furthest_ = p_;
    return *p_;
  }
  TrackingIterator& operator++() {
    ++p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator old = *this;
    ++p_;
    return old;
  }
  bool operator==(const TrackingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const TrackingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char** furthest_;
};

// Builds the DOM; records the first error instead of throwing inside nlohmann's parser.
class DomBuilder {
 public:
  DomBuilder(bool reject_duplicate_keys, const char* begin, const char* const* furthest)
      : reject_duplicates_(reject_duplicate_keys), begin_(begin), furthest_(furthest) {}

  bool null() { return Put(json(nullptr)); }
  bool boolean(bool v) { return Put(json(v)); }
  bool number_integer(json::number_integer_t v) { return Put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Put(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return Put(json(v)); }
  bool string(std::string& v) { return Put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return Put(json::binary(std::move(v))); }

  bool start_object(std::size_t) { return Open(json::object()); }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(json::array()); }
  bool end_array() { return Close(); }

  bool key(std::string& k) {
    json* object = stack_.back().value;
    if (reject_duplicates_ && object->contains(k)) {
      error_ = StrCat("duplicate key \"", k, "\" at ", JsonPointerChild(Pointer(), k),
                      " (each key may appear once per object)");
      // The lexer has read up to the key's closing quote.
      error_position_ = static_cast<size_t>(*furthest_ - begin_) + 1;
      return false;
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    error_position_ = position;
    error_ = Reason(e.what());
    return false;
  }

  json& root() { return root_; }
  const std::string& error() const { return error_; }
  size_t error_position() const { return error_position_; }
  bool has_position() const { return error_position_ != kNoPosition; }

 private:
  static constexpr size_t kNoPosition = static_cast<size_t>(-1);
  struct Frame {
    json* value;
    std::string pointer;
  };

  std::string Pointer() const { return stack_.empty() ? "" : stack_.back().pointer; }

  // Inserts `v` into the current container (or as the root) and returns where it lives.
  json* Insert(json&& v, std::string* pointer) {
    if (stack_.empty()) {
      root_ = std::move(v);
      *pointer = "";
      return &root_;
    }
    json* parent = stack_.back().value;
    if (parent->is_array()) {
      *pointer = JsonPointerChild(stack_.back().pointer, std::to_string(parent->size()));
      parent->push_back(std::move(v));
      return &parent->back();
    }
    *pointer = JsonPointerChild(stack_.back().pointer, key_);
    json& slot = (*parent)[key_];
    slot = std::move(v);
    return &slot;
  }

  bool Put(json&& v) {
    std::string pointer;
    Insert(std::move(v), &pointer);
    return true;
  }

  bool Open(json&& v) {
    if (static_cast<int>(stack_.size()) >= kMaxJsonDepth) {
      error_ = StrCat("nesting deeper than ", kMaxJsonDepth, " levels at ", Pointer(),
                      " (no SpecBed file needs that many)");
      return false;
    }
    std::string pointer;
    json* slot = Insert(std::move(v), &pointer);
    stack_.push_back({slot, pointer});
    return true;
  }

  bool Close() {
    stack_.pop_back();
    return true;
  }

  bool reject_duplicates_;
  const char* begin_;
  const char* const* furthest_;
  json root_;
  std::vector<Frame> stack_;
  std::string key_;
  std::string error_;
  size_t error_position_ = kNoPosition;
};

}  // namespace

std::string JsonPointerChild(const std::string& parent, std::string_view key) {
  std::string out = parent;
  out += '/';
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

json ParseJsonText(std::string_view text, const std::string& source,
                   const JsonParseOptions& options) {
  const char* furthest = text.data();
  DomBuilder builder(options.reject_duplicate_keys, text.data(), &furthest);
  bool ok = false;
  try {
    ok = json::sax_parse(TrackingIterator(text.data(), &furthest),
                         TrackingIterator(text.data() + text.size(), &furthest), &builder,
                         json::input_format_t::json, /*strict=*/true);
  } catch (const json::exception& e) {
    FailJsonException(e, source);
  }
  if (ok) return std::move(builder.root());
  const std::string expected =
      options.expected.empty() ? "" : StrCat("; expected ", options.expected);
  if (!builder.has_position()) Fail(source, ": not valid JSON: ", builder.error(), expected);
  // nlohmann reports the position after the offending character; name that character.
  const size_t at =
      std::min(text.size(), builder.error_position() > 0 ? builder.error_position() - 1
                                                         : builder.error_position());
  int64_t line = options.first_line;
  size_t line_start = 0;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  Fail(source, ":", line, ": not valid JSON (column ", at - line_start + 1, "): ", builder.error(),
       expected);
}

nlohmann::ordered_json ParseOrderedJsonText(std::string_view text, const std::string& source,
                                            const JsonParseOptions& options) {
  ParseJsonText(text, source, options);  // every check and error of the one reader
  return nlohmann::ordered_json::parse(text.begin(), text.end());
}

json ReadJsonFile(const std::string& path, const JsonParseOptions& options) {
  const std::string text = ReadFileToString(path);
  return ParseJsonText(text, path, options);
}

std::string DumpJsonForOutput(const json& j, int indent) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

void FailJsonException(const json::exception& e, const std::string& source,
                       const std::string& field) {
  std::string reason = Reason(e.what());
  // With JSON_DIAGNOSTICS (set for every SpecBed target in CMakeLists.txt) nlohmann prefixes a
  // type or range error with the value's JSON pointer: "(/methods/0/knobs/gamma) type must be
  // number, but is string". Use it when the caller did not name the field itself.
  std::string where = field;
  if (reason.size() > 2 && reason[0] == '(' && reason[1] == '/') {
    const size_t close = reason.find(") ");
    if (close != std::string::npos) {
      if (where.empty()) where = reason.substr(1, close - 1);
      reason = reason.substr(close + 2);
    }
  }
  if (where.empty()) Fail(source, ": ", reason);
  Fail(source, ": field ", where, ": ", reason);
}

}  // namespace specbed
