#include "ddp/common/json_input.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

namespace ddp {
namespace {

using nlohmann::json;

// The first pass: depth and syntax only, nothing is stored. It keeps going
// past the depth bound so the error can say how deep the document really is;
// the parser's own state is one bit per level, so that costs no memory to speak of.
class Shape final : public nlohmann::json_sax<json> {
 public:
  std::size_t deepest = 0;
  bool malformed = false;
  std::size_t error_byte = 0;
  std::string error_text;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool key(string_t&) override { return true; }
  bool start_object(std::size_t) override { return enter(); }
  bool start_array(std::size_t) override { return enter(); }
  bool end_object() override { return leave(); }
  bool end_array() override { return leave(); }
  bool parse_error(std::size_t position, const std::string&, const json::exception& e) override {
    malformed = true;
    error_byte = position;
    error_text = e.what();
    // "[json.exception.parse_error.101] parse error at ...": the tag means nothing to a user.
    if (const auto p = error_text.find("] "); p != std::string::npos) error_text.erase(0, p + 2);
    return false;
  }

 private:
  bool enter() {
    if (++depth_ > deepest) deepest = depth_;
    return true;
  }
  bool leave() {
    --depth_;
    return true;
  }
  std::size_t depth_ = 0;
};

std::string too_large(std::size_t seen, std::size_t max_bytes) {
  return "is " + std::to_string(seen) + " bytes; at most " + std::to_string(max_bytes) + " are read";
}

}  // namespace

JsonError::JsonError(Kind kind, const std::string& what, std::string detail, std::size_t byte)
    : Error(what), kind_(kind), detail_(std::move(detail)), byte_(byte) {}

json parse_json(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    throw JsonError(JsonError::Kind::kTooLarge, too_large(text.size(), limits.max_bytes));
  }
  // nlohmann stops at a NUL byte as at the end of the input, so "{} <NUL> more"
  // would parse as {} while a reader of the whole text sees more. JSON has no
  // raw NUL anywhere (in a string it is \u0000): refuse it.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    const auto where = "a NUL byte at byte " + std::to_string(nul + 1);
    throw JsonError(JsonError::Kind::kMalformed, "is not valid JSON: " + where, where, nul + 1);
  }
  Shape shape;
  json::sax_parse(text, &shape);
  // Too deep wins over malformed: a truncated deep document is both, and the
  // depth is what the producer has to fix.
  if (shape.deepest > limits.max_depth) {
    throw JsonError(JsonError::Kind::kTooDeep, "nests " + std::to_string(shape.deepest) +
                                                   " levels deep; at most " +
                                                   std::to_string(limits.max_depth) + " are read");
  }
  if (shape.malformed) {
    throw JsonError(JsonError::Kind::kMalformed, "is not valid JSON: " + shape.error_text, shape.error_text,
                    shape.error_byte);
  }
  return json::parse(text);
}

json try_parse_json(std::string_view text, const JsonLimits& limits, std::string* why) {
  try {
    return parse_json(text, limits);
  } catch (const JsonError& e) {
    if (why != nullptr) *why = e.what();
  }
  return json(json::value_t::discarded);
}

std::optional<std::string> read_json_file(const std::filesystem::path& path, std::size_t max_bytes,
                                          bool regular_only) {
  const auto unreadable = [](const std::string& why) {
    return JsonError(JsonError::Kind::kUnreadable, "cannot be read: " + why, why);
  };
  // O_NONBLOCK: opening a FIFO nobody writes to must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (regular_only ? O_NONBLOCK : 0));
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw unreadable(errno_text(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw unreadable(errno_text(errno));
  if (regular_only && !S_ISREG(st.st_mode)) {
    throw unreadable(S_ISFIFO(st.st_mode)  ? "it is a FIFO, not a regular file"
                     : S_ISDIR(st.st_mode) ? "it is a directory, not a regular file"
                                           : "it is a device or socket, not a regular file");
  }
  if (S_ISREG(st.st_mode) && static_cast<std::uintmax_t>(st.st_size) > max_bytes) {
    throw JsonError(JsonError::Kind::kTooLarge, too_large(static_cast<std::size_t>(st.st_size), max_bytes));
  }
  // Read up to one byte past the bound: a file that grew since fstat, or a
  // pipe, is caught without reading the rest of it.
  std::string text;
  char buf[65536];
  while (text.size() <= max_bytes) {
    const ssize_t n = ::read(fd, buf, std::min(sizeof buf, max_bytes + 1 - text.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw unreadable(errno_text(errno));
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
  }
  throw JsonError(JsonError::Kind::kTooLarge, "holds more than " + std::to_string(max_bytes) +
                                                  " bytes; at most " + std::to_string(max_bytes) +
                                                  " are read");
}

}  // namespace ddp
