#include "ddp/run.hpp"

#include <cxxabi.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "ddp/common/error.hpp"
#include "ddp/common/exit_code.hpp"
#include "error_file.hpp"

namespace ddp {
namespace {

// Everything the signal handler touches is preallocated: it may not malloc.
char g_error_file[4096];
char g_json[64 * 1024];
char g_frames_text[32 * 1024];
std::size_t g_json_len = 0;
constexpr int kFatalSignals[] = {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGFPE:
      return "SIGFPE";
    case SIGBUS:
      return "SIGBUS";
    case SIGILL:
      return "SIGILL";
    default:
      return "signal";
  }
}

// Minimal async-signal-safe string building into g_json.
void put(const char* s, std::size_t n) {
  for (std::size_t i = 0; i < n && g_json_len + 1 < sizeof(g_json); ++i) g_json[g_json_len++] = s[i];
}
void put(const char* s) { put(s, std::strlen(s)); }
void put_number(long long v) {
  char buf[32];
  int n = 0;
  const bool neg = v < 0;
  unsigned long long u = neg ? 0ULL - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
  do {
    buf[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (neg) buf[n++] = '-';
  while (n > 0) put(&buf[--n], 1);
}
void put_json_escaped(const char* s, std::size_t n) {
  static const char kHex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      const char esc[2] = {'\\', static_cast<char>(c)};
      put(esc, 2);
    } else if (c == '\n') {
      put("\\n");
    } else if (c < 0x20 || c >= 0x80) {
      // Non-ASCII is escaped byte-wise as \u00XX: always valid JSON, no decoding needed.
      const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      put(esc, 6);
    } else {
      put(reinterpret_cast<const char*>(&c), 1);
    }
  }
}

// Frames as text via backtrace_symbols_fd (which, unlike backtrace_symbols,
// does not allocate) into an anonymous memory file we read back.
std::size_t frames_text() {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const int fd = static_cast<int>(memfd_create("ddp-stack", MFD_CLOEXEC));
  if (fd < 0) return 0;
  backtrace_symbols_fd(frames, n, fd);
  std::size_t len = 0;
  if (lseek(fd, 0, SEEK_SET) == 0) {
    ssize_t got;
    while (len < sizeof(g_frames_text) &&
           (got = read(fd, g_frames_text + len, sizeof(g_frames_text) - len)) > 0) {
      len += static_cast<std::size_t>(got);
    }
  }
  close(fd);
  return len;
}

void on_fatal_signal(int sig) {
  if (g_error_file[0] != '\0') {
    g_json_len = 0;
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    put("{\"message\": {\"message\": \"Signal ");
    put_number(sig);
    put(" (");
    put(signal_name(sig));
    put(") received by PID ");
    put_number(getpid());
    put("\", \"extraInfo\": {\"py_callstack\": \"");
    const std::size_t n = frames_text();
    put_json_escaped(g_frames_text, n);
    put("\", \"timestamp\": \"");
    put_number(now.tv_sec);
    put("\"}}}");
    const int fd = open(g_error_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      std::size_t off = 0;
      while (off < g_json_len) {
        const ssize_t w = write(fd, g_json + off, g_json_len - off);
        if (w <= 0) break;
        off += static_cast<std::size_t>(w);
      }
      close(fd);
    }
  }
  // Die of the same signal so the launcher sees the real cause (128+N).
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_signal_handlers() {
  // An alternate stack lets the handler run after a stack overflow.
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof(alt_stack);
  sigaltstack(&ss, nullptr);
  // backtrace() loads libgcc_s lazily (which allocates) on first use: do it now.
  void* warm[2];
  backtrace(warm, 2);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : kFatalSignals) sigaction(sig, &sa, nullptr);
}

std::string demangled_type(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name(
      abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), &std::free);
  return status == 0 && name ? name.get() : type.name();
}

std::string program_name(int argc, char** argv) {
  if (argc < 1 || argv[0] == nullptr) return "ddp";
  const char* slash = std::strrchr(argv[0], '/');
  return slash ? slash + 1 : argv[0];
}

long long unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void record_error(const std::string& type, const std::string& what) {
  try {
    const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
    if (path == nullptr || *path == '\0') return;
    detail::write_error_file(
        path, detail::error_file_json(type + ": " + what, detail::current_stack(2), unix_now(), type));
  } catch (...) {
  }
}

int run(int argc, char** argv, const std::function<int(int, char**)>& fn) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (path != nullptr && std::strlen(path) < sizeof(g_error_file)) {
    std::strcpy(g_error_file, path);
  }
  install_signal_handlers();
  const std::string prog = program_name(argc, argv);
  try {
    return fn(argc, argv);
  } catch (const std::exception& e) {
    const std::string type = demangled_type(typeid(e));
    record_error(type, e.what());
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), e.what());
    return exit_code_of(e);
  } catch (...) {
    record_error("UnknownException", "a non-standard exception was thrown");
    std::fprintf(stderr, "%s: error: a non-standard exception was thrown\n", prog.c_str());
    return 1;
  }
}

}  // namespace ddp
