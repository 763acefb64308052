// Writing TORCHELASTIC_ERROR_FILE in the JSON layout of torch's @record.
#pragma once

#include <string>

namespace ddp::detail {

// {"message": {"message": message, "extraInfo": {"py_callstack": stack, "timestamp": "<unix s>",
// "error_type": error_type}}}; error_type (the exception's type, "ddp::MembershipChanged") only when
// given: ddprun reads it to tell a trainer that cannot re-form (docs/worker-sdk.md).
std::string error_file_json(const std::string& message, const std::string& stack, long long timestamp,
                            const std::string& error_type = "");

// The current thread's stack, one frame per line (symbol names where the
// dynamic symbol table has them).
std::string current_stack(int skip_frames);

// Writes the JSON to `path` (replacing it); false on an I/O error.
bool write_error_file(const std::string& path, const std::string& json);

}  // namespace ddp::detail
