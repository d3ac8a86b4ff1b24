/* tunehost SDK: ABI version and the single compatibility rule. */
#ifndef TUNEHOST_SDK_VERSION_H
#define TUNEHOST_SDK_VERSION_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CMake reads these three lines to version the tunehost-sdk package. */
#define TH_VERSION_MAJOR 1
#define TH_VERSION_MINOR 0
#define TH_VERSION_REVISION 0

typedef struct th_version {
  uint32_t major;
  uint32_t minor;
  uint32_t revision;
} th_version_t;

#define TH_VERSION_INIT {TH_VERSION_MAJOR, TH_VERSION_MINOR, TH_VERSION_REVISION}

/* The only compatibility rule: a plugin built against `plugin` runs in a host
 * built against this header when the majors are equal and the plugin's minor
 * is not newer than the host's. The host checks it before calling anything. */
static inline bool th_version_is_compatible(th_version_t plugin) {
  return plugin.major == TH_VERSION_MAJOR && plugin.minor <= TH_VERSION_MINOR;
}

#ifdef __cplusplus
}
#endif

#endif /* TUNEHOST_SDK_VERSION_H */
