/* tunehost SDK: what the host offers a plugin instance. */
#ifndef TUNEHOST_SDK_HOST_H
#define TUNEHOST_SDK_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "tunehost/sdk/status.h"
#include "tunehost/sdk/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum th_log_level {
  TH_LOG_DEBUG = 0,
  TH_LOG_INFO = 1,
  TH_LOG_WARNING = 2,
  TH_LOG_ERROR = 3
} th_log_level_t;

/* Appends bytes to a host-owned buffer (output of save_state, ...).
 * Thread: the thread of the call it was passed to. Ownership: host-owned,
 * valid only during that call; the bytes are copied. May be called several
 * times (appends). Returns TH_OK or TH_OUT_OF_MEMORY. */
typedef struct th_byte_writer th_byte_writer_t;
struct th_byte_writer {
  void* writer_data; /* host's, do not touch */
  th_status (*write)(const th_byte_writer_t* self, const uint8_t* data, size_t size);
};

/* Receives generated parameter sets (MessagePack maps) from a tuner.
 * Thread and ownership as th_byte_writer. `parameter_id` must be one of the ids
 * the host passed to generate(); each id at most once. Returns TH_OK, or
 * TH_INVALID_ARGUMENT for an unknown/duplicate id or bytes that are not one
 * MessagePack map. */
typedef struct th_param_sink th_param_sink_t;
struct th_param_sink {
  void* sink_data; /* host's, do not touch */
  th_status (*emit)(const th_param_sink_t* self, int64_t parameter_id, const uint8_t* params,
                    size_t size);
};

/* One per plugin instance, given to the factory's create(). Host-owned; valid
 * until the instance's destroy() returns. Grows by appending only. */
typedef struct th_host th_host_t;
struct th_host {
  uint32_t struct_size; /* sizeof(th_host_t) of the host; check before using later fields */
  th_version_t abi_version;
  void* host_data; /* host's, do not touch */
  const char* name;    /* "tunehost"; host-owned, static */
  const char* version; /* host version string; host-owned, static */

  /* Logs one line (UTF-8, no trailing newline needed). Thread: any. `message`
   * is borrowed for the call. Never fails. */
  void (*log)(const th_host_t* self, th_log_level_t level, const char* message);

  /* Tuners only (the NNI send-trial callback, the "credit" pattern): emits
   * parameters for an id previously passed to generate() and not yet emitted,
   * at any later time, e.g. from trial_end. Thread: any, also from inside a
   * tuner callback. `params` (one MessagePack map) is copied before return.
   * Returns TH_OK; TH_INVALID_ARGUMENT for an unknown or used id or bad bytes;
   * TH_NOT_SUPPORTED for assessors; TH_BAD_STATE after the experiment ended. */
  th_status (*send_trial)(const th_host_t* self, int64_t parameter_id, const uint8_t* params,
                          size_t size);

  /* Looks up a host extension by versioned id ("tunehost.host-ext.x/1").
   * Thread: any. Returns NULL when unsupported. */
  const void* (*get_extension)(const th_host_t* self, const char* extension_id);
};

#ifdef __cplusplus
}
#endif

#endif /* TUNEHOST_SDK_HOST_H */
