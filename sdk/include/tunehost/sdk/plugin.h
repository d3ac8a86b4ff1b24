/* tunehost SDK: the plugin entry point and descriptor. */
#ifndef TUNEHOST_SDK_PLUGIN_H
#define TUNEHOST_SDK_PLUGIN_H

#include <stdbool.h>
#include <stdint.h>

#include "tunehost/sdk/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TH_EXPORT __declspec(dllexport)
#else
#define TH_EXPORT __attribute__((visibility("default")))
#endif

/* Kinds a descriptor can name in `kinds`. */
#define TH_KIND_TUNER "tuner"
#define TH_KIND_ASSESSOR "assessor"

/* Plain data describing one algorithm a plugin provides. All strings are
 * plugin-owned, static, UTF-8, valid until deinit(). */
typedef struct th_plugin_descriptor {
  th_version_t abi_version; /* TH_VERSION_INIT of the SDK the plugin was built with */
  const char* id;           /* reverse-DNS, unique, required: "org.tunehost.random" */
  const char* name;         /* short name used in configs, required: "random" */
  const char* vendor;       /* may be NULL */
  const char* version;      /* the algorithm's version, may be NULL */
  const char* description;  /* one line, may be NULL */
  const char* const* kinds; /* NULL-terminated, e.g. {"tuner", NULL}; required */
} th_plugin_descriptor_t;

/* The one exported symbol of a plugin: an object, not a function. Define it
 * as a constant of this type named `th_plugin_entry`, with default
 * visibility, e.g.
 *     TH_EXPORT const th_plugin_entry_t th_plugin_entry = {
 *         {TH_VERSION_MAJOR, TH_VERSION_MINOR, TH_VERSION_REVISION},
 *         Init, Deinit, GetFactory};
 * The host finds it with dlsym, reads abi_version from it before calling
 * anything, and calls its three functions. */
typedef struct th_plugin_entry {
  th_version_t abi_version; /* first, always: the host checks it before anything else */

  /* Called once after loading, before get_factory. Thread: host main thread.
   * `plugin_path` is the file's path, borrowed for the call. Returns false to
   * refuse loading (the host logs the file and moves on). */
  bool (*init)(const char* plugin_path);

  /* Called once before unloading, after every object the plugin made has been
   * destroyed. Thread: host main thread. */
  void (*deinit)(void);

  /* Returns the factory for a versioned id ("tunehost.tuner-factory/1",
   * "tunehost.assessor-factory/1"), or NULL when not provided. Thread: host
   * main thread, after init. The returned pointer is plugin-owned and valid
   * until deinit(). */
  const void* (*get_factory)(const char* factory_id);
} th_plugin_entry_t;

#define TH_PLUGIN_ENTRY_SYMBOL "th_plugin_entry"

#ifdef __cplusplus
}
#endif

#endif /* TUNEHOST_SDK_PLUGIN_H */
