// ddp::run: the main() wrapper that records how a worker failed, so the
// launcher's summary can name the root cause.
#pragma once

#include <functional>
#include <string>

namespace ddp {

// Calls fn(argc, argv) and returns its exit code. Before that it installs
// handlers for SIGSEGV, SIGABRT, SIGFPE, SIGBUS and SIGILL. When
// TORCHELASTIC_ERROR_FILE is set, an uncaught exception or one of those signals
// is written there in the JSON format of torch's @record:
//   {"message": {"message": "<Type>: <what>",
//                "extraInfo": {"py_callstack": "<stack>", "timestamp": "<unix s>"}}}
// An exception is also printed to stderr as one line; the return value is then
// 2 for ddp::ConfigError (a usage/config mistake) and 1 otherwise. A fatal
// signal is re-raised with its default action after the file is written, so the
// process dies of that signal (exit status 128+N to a shell).
int run(int argc, char** argv, const std::function<int(int, char**)>& fn);

// Writes the error file for an error caught by the program itself (no-op when
// TORCHELASTIC_ERROR_FILE is unset). Never throws.
void record_error(const std::string& type, const std::string& what);

}  // namespace ddp
