/* tunehost SDK: assessors (early stopping, the NNI Assessor interface). */
#ifndef TUNEHOST_SDK_ASSESSOR_H
#define TUNEHOST_SDK_ASSESSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "tunehost/sdk/host.h"
#include "tunehost/sdk/plugin.h"
#include "tunehost/sdk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TH_ASSESSOR_FACTORY_ID "tunehost.assessor-factory/1"

typedef enum th_assessment { TH_ASSESS_BAD = 0, TH_ASSESS_GOOD = 1 } th_assessment_t;

/* An assessor instance. Plugin-owned; valid until destroy(). Every function is
 * called on the host's assessor strand, one call at a time. Borrowed bytes and
 * error rules as for th_tuner_t. */
typedef struct th_assessor th_assessor_t;
struct th_assessor {
  uint32_t struct_size;
  void* assessor_data; /* plugin's */

  void (*destroy)(const th_assessor_t* self);

  /* NNI assess_trial: `history` is an array of the trial's PERIODICAL
   * metrics in sequence order, never empty, longer than at the previous call
   * for this trial. `trial_id` is borrowed. Writes GOOD or BAD to `*result`.
   * After BAD the trial is stopped and not assessed again. */
  th_status (*assess_trial)(const th_assessor_t* self, const char* trial_id, th_bytes_t history,
                            th_assessment_t* result, th_error_t* err);

  /* NNI trial_end: once per trial that was assessed at least once. */
  th_status (*trial_end)(const th_assessor_t* self, const char* trial_id, bool success,
                         th_error_t* err);

  /* Checkpoint, as th_tuner_t; may be NULL. */
  th_status (*save_state)(const th_assessor_t* self, const th_byte_writer_t* out,
                          th_error_t* err);
  th_status (*load_state)(const th_assessor_t* self, th_bytes_t state, th_error_t* err);
};

typedef struct th_assessor_factory th_assessor_factory_t;
struct th_assessor_factory {
  uint32_t (*count)(const th_assessor_factory_t* self);
  const th_plugin_descriptor_t* (*get_descriptor)(const th_assessor_factory_t* self,
                                                  uint32_t index);
  const th_assessor_t* (*create)(const th_assessor_factory_t* self, const th_host_t* host,
                                 const char* assessor_id, th_bytes_t class_args,
                                 th_error_t* err);
};

#ifdef __cplusplus
}
#endif

#endif /* TUNEHOST_SDK_ASSESSOR_H */
