/* tunehost SDK: status codes returned by every fallible ABI function. */
#ifndef TUNEHOST_SDK_STATUS_H
#define TUNEHOST_SDK_STATUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* No exception ever crosses the ABI: functions return one of these. Detail
 * goes into the caller's th_error_t buffer (or host->log). */
typedef int32_t th_status;
enum {
  TH_OK = 0,
  TH_INVALID_ARGUMENT = 1, /* bad search space, bad classArgs, bad bytes */
  TH_NOT_SUPPORTED = 2,    /* optional operation not implemented */
  TH_NO_MORE_TRIALS = 3,   /* tuner: the space is exhausted (for now) */
  TH_INTERNAL = 4,         /* anything else; the message says what */
  TH_OUT_OF_MEMORY = 5,
  TH_BAD_STATE = 6 /* called in the wrong order, e.g. generate before a space */
};

/* A caller-owned buffer for a human-readable error message. The callee writes
 * at most `capacity` bytes including the terminating NUL; it may leave it
 * untouched. `message` may be NULL when capacity is 0. */
typedef struct th_error {
  char* message;
  size_t capacity;
} th_error_t;

/* Borrowed bytes: valid only for the duration of the call that passes them. */
typedef struct th_bytes {
  const uint8_t* data;
  size_t size;
} th_bytes_t;

#ifdef __cplusplus
}
#endif

#endif /* TUNEHOST_SDK_STATUS_H */
