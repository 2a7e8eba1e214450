// CANN's logging and error-message libraries (libunified_dlog, liberror_manager: closed) for the
// host-check driver, so the open host libraries built by scripts/check_ascend_host.py link without
// them. The open sources call these unconditionally on their error paths (DlogRecord for errors,
// error_message::Report* as weak symbols that would otherwise be null): errors go to stderr with a
// "[CANN]" prefix, so a failure inside CANN is told apart from the op_host's own messages.
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <vector>

extern "C" int32_t CheckLogLevel(int32_t /*module_id*/, int32_t log_level) {
  return log_level >= 3 ? 1 : 0;  // DLOG_ERROR (3) and above, as CANN's default log level
}

extern "C" void DlogRecord(int32_t /*module_id*/, int32_t level, const char* fmt, ...) {
  if (level < 3) return;
  va_list args;
  va_start(args, fmt);
  std::fputs("[CANN] ", stderr);
  std::vfprintf(stderr, fmt, args);
  std::fputc('\n', stderr);
  va_end(args);
}

namespace error_message {

int32_t ReportInnerErrMsg(const char* file, const char* func, uint32_t line, const char* code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::fprintf(stderr, "[CANN] %s %s:%u %s: ", code, file, line, func);
  std::vfprintf(stderr, fmt, args);
  std::fputc('\n', stderr);
  va_end(args);
  return 0;
}

int32_t ReportPredefinedErrMsg(const char* code, const std::vector<const char*>& /*key*/,
                               const std::vector<const char*>& /*value*/) {
  std::fprintf(stderr, "[CANN] %s\n", code);
  return 0;
}

int32_t ReportPredefinedErrMsg(const char* code) {
  std::fprintf(stderr, "[CANN] %s\n", code);
  return 0;
}

}  // namespace error_message
