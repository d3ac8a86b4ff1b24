/* crandom: random search as a tunehost tuner plugin written in C.
 *
 * What a C author needs beyond the SDK's C headers is a MessagePack
 * library: search spaces, parameters and class arguments cross the ABI as
 * MessagePack bytes. This example uses msgpack-c from Debian (libmsgpack-dev):
 * msgpack_unpack_next() to read the search space and the class arguments,
 * msgpack_packer over an msgpack_sbuffer to write each parameter set.
 *
 * Class arguments: {"seed": int} (default 0), "optimize_mode" accepted and
 * unused (random search does not need it); anything else is refused by name.
 * Search space: choice, randint, uniform, quniform, loguniform, qloguniform
 * (NNI's formulas); other types are refused naming the parameter. */
#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tunehost/sdk/sdk.h"

static const char* const kKinds[] = {TH_KIND_TUNER, NULL};
static const th_plugin_descriptor_t kDescriptor = {
    {TH_VERSION_MAJOR, TH_VERSION_MINOR, TH_VERSION_REVISION},
    "org.example.crandom",
    "crandom",
    "tunehost examples",
    "1.0.0",
    "random search, written in C with msgpack-c",
    kKinds,
};

typedef struct {
  uint64_t rng;           /* xorshift64* state, never 0 */
  msgpack_unpacked space; /* the search space, unpacked from space_bytes */
  char* space_bytes;      /* our copy: msgpack-c's objects point into the bytes they
                           * came from, and the host's are borrowed for one call */
  int has_space;
} Random;

static void Say(th_error_t* err, const char* format, const char* key) {
  if (err != NULL && err->message != NULL && err->capacity > 0) {
    snprintf(err->message, err->capacity, format, key);
  }
}

static uint64_t Next(Random* r) {
  r->rng ^= r->rng >> 12;
  r->rng ^= r->rng << 25;
  r->rng ^= r->rng >> 27;
  return r->rng * 2685821657736338717ULL;
}

static double Uniform01(Random* r) { return (double)(Next(r) >> 11) * (1.0 / 9007199254740992.0); }

/* The map value under `key` (a MessagePack string), or NULL. */
static const msgpack_object* Get(const msgpack_object* map, const char* key) {
  if (map->type != MSGPACK_OBJECT_MAP) return NULL;
  const size_t n = strlen(key);
  for (uint32_t i = 0; i < map->via.map.size; ++i) {
    const msgpack_object* k = &map->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
        memcmp(k->via.str.ptr, key, n) == 0) {
      return &map->via.map.ptr[i].val;
    }
  }
  return NULL;
}

static int Number(const msgpack_object* o, double* out) {
  switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
      *out = (double)o->via.u64;
      return 1;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
      *out = (double)o->via.i64;
      return 1;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
      *out = o->via.f64;
      return isfinite(o->via.f64);
    default:
      return 0;
  }
}

static int TypeIs(const msgpack_object* type, const char* name) {
  return type->type == MSGPACK_OBJECT_STR && type->via.str.size == strlen(name) &&
         memcmp(type->via.str.ptr, name, type->via.str.size) == 0;
}

/* Checks one parameter's {"_type", "_value"}; NULL when fine, else the problem. */
static const char* CheckParameter(const msgpack_object* spec) {
  const msgpack_object* type = Get(spec, "_type");
  const msgpack_object* value = Get(spec, "_value");
  if (type == NULL || value == NULL || value->type != MSGPACK_OBJECT_ARRAY) {
    return "%s: needs \"_type\" and an array \"_value\"";
  }
  if (TypeIs(type, "choice")) return value->via.array.size > 0 ? NULL : "%s: empty choice";
  const int quantized = TypeIs(type, "quniform") || TypeIs(type, "qloguniform");
  if (!TypeIs(type, "randint") && !TypeIs(type, "uniform") && !TypeIs(type, "loguniform") &&
      !quantized) {
    return "%s: crandom supports choice, randint, uniform, quniform, loguniform, qloguniform";
  }
  double low, high, q = 1;
  if (value->via.array.size != (quantized ? 3u : 2u) || !Number(&value->via.array.ptr[0], &low) ||
      !Number(&value->via.array.ptr[1], &high) ||
      (quantized && !Number(&value->via.array.ptr[2], &q))) {
    return "%s: _value must be [low, high] ([low, high, q] for q types) of numbers";
  }
  if (!(low < high) || q <= 0) return "%s: needs low < high (and q > 0)";
  if ((TypeIs(type, "loguniform") || TypeIs(type, "qloguniform")) && low <= 0) {
    return "%s: loguniform needs low > 0";
  }
  return NULL;
}

static void PackParameter(Random* r, const msgpack_object* spec, msgpack_packer* pk) {
  const msgpack_object* type = Get(spec, "_type");
  const msgpack_object_array* v = &Get(spec, "_value")->via.array;
  if (TypeIs(type, "choice")) {
    msgpack_pack_object(pk, v->ptr[Next(r) % v->size]);
    return;
  }
  double low, high, q = 1, x;
  Number(&v->ptr[0], &low);
  Number(&v->ptr[1], &high);
  if (v->size == 3) Number(&v->ptr[2], &q);
  if (TypeIs(type, "randint")) { /* NNI: an integer in [low, high) */
    const int64_t lo = (int64_t)ceil(low), span = (int64_t)ceil(high) - lo;
    msgpack_pack_int64(pk, lo + (span > 0 ? (int64_t)(Next(r) % (uint64_t)span) : 0));
    return;
  }
  if (TypeIs(type, "uniform") || TypeIs(type, "quniform")) {
    x = low + (high - low) * Uniform01(r);
  } else {
    x = exp(log(low) + (log(high) - log(low)) * Uniform01(r));
  }
  if (v->size == 3) x = fmin(high, fmax(low, round(x / q) * q)); /* NNI: clip(round(x/q)*q) */
  msgpack_pack_double(pk, x);
}

static void Destroy(const th_tuner_t* self) {
  Random* r = self->tuner_data;
  if (r->has_space) msgpack_unpacked_destroy(&r->space);
  free(r->space_bytes);
  free(r);
  free((void*)self);
}

static th_status UpdateSearchSpace(const th_tuner_t* self, th_bytes_t bytes, th_error_t* err) {
  Random* r = self->tuner_data;
  char* copy = malloc(bytes.size > 0 ? bytes.size : 1);
  if (copy == NULL) {
    Say(err, "%s", "out of memory");
    return TH_OUT_OF_MEMORY;
  }
  memcpy(copy, bytes.data, bytes.size);
  msgpack_unpacked space;
  msgpack_unpacked_init(&space);
  size_t offset = 0;
  if (msgpack_unpack_next(&space, copy, bytes.size, &offset) != MSGPACK_UNPACK_SUCCESS ||
      space.data.type != MSGPACK_OBJECT_MAP || space.data.via.map.size == 0) {
    msgpack_unpacked_destroy(&space);
    free(copy);
    Say(err, "%s", "search space: expected a non-empty map of parameters");
    return TH_INVALID_ARGUMENT;
  }
  for (uint32_t i = 0; i < space.data.via.map.size; ++i) {
    const msgpack_object_kv* kv = &space.data.via.map.ptr[i];
    const char* problem = CheckParameter(&kv->val);
    if (problem != NULL) {
      char key[128];
      const size_t n = kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size < sizeof key
                           ? kv->key.via.str.size
                           : 0;
      memcpy(key, n > 0 ? kv->key.via.str.ptr : "", n);
      key[n] = '\0';
      Say(err, problem, key);
      msgpack_unpacked_destroy(&space);
      free(copy);
      return TH_INVALID_ARGUMENT;
    }
  }
  if (r->has_space) msgpack_unpacked_destroy(&r->space);
  free(r->space_bytes);
  r->space = space; /* the zone moves with it */
  r->space_bytes = copy;
  r->has_space = 1;
  return TH_OK;
}

static th_status Generate(const th_tuner_t* self, const int64_t* ids, uint32_t count,
                          const th_param_sink_t* out, th_error_t* err) {
  Random* r = self->tuner_data;
  if (!r->has_space) {
    Say(err, "%s", "no search space yet");
    return TH_BAD_STATE;
  }
  const msgpack_object_map* space = &r->space.data.via.map;
  for (uint32_t i = 0; i < count; ++i) {
    msgpack_sbuffer buf;
    msgpack_sbuffer_init(&buf);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &buf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, space->size);
    for (uint32_t j = 0; j < space->size; ++j) {
      msgpack_pack_object(&pk, space->ptr[j].key);
      PackParameter(r, &space->ptr[j].val, &pk);
    }
    th_status st = out->emit(out, ids[i], (const uint8_t*)buf.data, buf.size);
    msgpack_sbuffer_destroy(&buf);
    if (st != TH_OK) {
      Say(err, "%s", "the host refused a parameter set");
      return st;
    }
  }
  return TH_OK;
}

static th_status ReceiveTrialResult(const th_tuner_t* self, int64_t parameter_id,
                                    th_bytes_t parameters, th_bytes_t value, double scalar,
                                    uint32_t flags, th_error_t* err) {
  (void)self, (void)parameter_id, (void)parameters, (void)value, (void)scalar, (void)flags,
      (void)err;
  return TH_OK; /* random search learns nothing */
}

static th_status TrialEnd(const th_tuner_t* self, int64_t parameter_id, bool success,
                          th_error_t* err) {
  (void)self, (void)parameter_id, (void)success, (void)err;
  return TH_OK;
}

/* {"seed": int, "optimize_mode": "maximize"|"minimize"}; anything else refused. */
static int ReadClassArgs(th_bytes_t bytes, uint64_t* seed, th_error_t* err) {
  *seed = 0;
  if (bytes.size == 0) return 1;
  msgpack_unpacked args;
  msgpack_unpacked_init(&args);
  size_t offset = 0;
  int ok = msgpack_unpack_next(&args, (const char*)bytes.data, bytes.size, &offset) ==
               MSGPACK_UNPACK_SUCCESS &&
           args.data.type == MSGPACK_OBJECT_MAP;
  if (!ok) Say(err, "%s", "classArgs: expected a map");
  for (uint32_t i = 0; ok && i < args.data.via.map.size; ++i) {
    const msgpack_object_kv* kv = &args.data.via.map.ptr[i];
    if (TypeIs(&kv->key, "seed") && kv->val.type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
      *seed = kv->val.via.u64;
    } else if (TypeIs(&kv->key, "optimize_mode") &&
               (TypeIs(&kv->val, "maximize") || TypeIs(&kv->val, "minimize"))) {
      /* accepted, unused */
    } else {
      Say(err, "%s",
          "classArgs: crandom takes seed (a non-negative integer) and optimize_mode "
          "(maximize or minimize)");
      ok = 0;
    }
  }
  msgpack_unpacked_destroy(&args);
  return ok;
}

static uint32_t Count(const th_tuner_factory_t* self) {
  (void)self;
  return 1;
}

static const th_plugin_descriptor_t* GetDescriptor(const th_tuner_factory_t* self, uint32_t index) {
  (void)self;
  return index == 0 ? &kDescriptor : NULL;
}

static const th_tuner_t* Create(const th_tuner_factory_t* self, const th_host_t* host,
                                const char* tuner_id, th_bytes_t class_args, th_error_t* err) {
  (void)self, (void)host, (void)tuner_id;
  uint64_t seed;
  if (!ReadClassArgs(class_args, &seed, err)) return NULL;
  th_tuner_t* t = calloc(1, sizeof *t);
  Random* r = calloc(1, sizeof *r);
  if (t == NULL || r == NULL) {
    free(t);
    free(r);
    Say(err, "%s", "out of memory");
    return NULL;
  }
  r->rng = seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL;
  if (r->rng == 0) r->rng = 1;
  t->struct_size = sizeof *t;
  t->tuner_data = r;
  t->destroy = Destroy;
  t->update_search_space = UpdateSearchSpace;
  t->generate = Generate;
  t->receive_trial_result = ReceiveTrialResult;
  t->trial_end = TrialEnd;
  /* import_data, save_state, load_state stay NULL: not supported (a resume
   * replays nothing to this tuner; it has nothing to learn). */
  return t;
}

static const th_tuner_factory_t kFactory = {Count, GetDescriptor, Create};

static bool Init(const char* plugin_path) {
  (void)plugin_path;
  return true;
}

static void Deinit(void) {}

static const void* GetFactory(const char* factory_id) {
  return strcmp(factory_id, TH_TUNER_FACTORY_ID) == 0 ? &kFactory : NULL;
}

TH_EXPORT const th_plugin_entry_t th_plugin_entry = {
    {TH_VERSION_MAJOR, TH_VERSION_MINOR, TH_VERSION_REVISION}, Init, Deinit, GetFactory};
