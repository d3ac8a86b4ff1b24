// Text that comes from a plugin (its error messages, exception texts, log
// lines) is cleaned before it reaches the host's logs, events and replies
// (wire-format.md §4.3): a plugin must not be able to flood a log line,
// break a JSON or MessagePack consumer with invalid UTF-8, or forge log
// lines and terminal escapes with control characters.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tunehost::host {

inline constexpr size_t kMaxPluginTextBytes = 1024;

// At most `max_bytes` bytes of valid UTF-8 (cut on a character boundary,
// with " … (N bytes cut)" appended); invalid sequences become U+FFFD; control
// characters but tab (newlines and ESC included) become spaces.
std::string CleanPluginText(std::string_view text, size_t max_bytes = kMaxPluginTextBytes);

}  // namespace tunehost::host
