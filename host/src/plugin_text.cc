#include "tunehost/host/plugin_text.h"

#include <cstdint>

namespace tunehost::host {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
size_t Utf8Length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  size_t n = 0;
  uint32_t min = 0;
  uint32_t cp = 0;
  if (b0 < 0x80) return 1;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

std::string CleanPluginText(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  size_t i = 0;
  while (i < text.size()) {
    size_t n = Utf8Length(text, i);
    std::string_view piece;
    char space[1] = {' '};
    if (n == 0) {
      piece = kReplacement;
      n = 1;
    } else if ((n == 1 && (static_cast<uint8_t>(text[i]) < 0x20 || text[i] == 0x7F) &&
                text[i] != '\t') ||
               (n == 2 && static_cast<uint8_t>(text[i]) == 0xC2 &&
                static_cast<uint8_t>(text[i + 1]) < 0xA0)) {
      // C0 controls and DEL; C1 controls (U+0080..U+009F: CSI and friends).
      piece = std::string_view(space, 1);
    } else {
      piece = text.substr(i, n);
    }
    if (out.size() + piece.size() > max_bytes) {
      out += " \xE2\x80\xA6 (" + std::to_string(text.size() - i) + " bytes cut)";
      return out;
    }
    out.append(piece.data(), piece.size());
    i += n;
  }
  return out;
}

}  // namespace tunehost::host
