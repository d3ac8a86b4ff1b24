/* tunehost SDK: everything a plugin needs. */
#ifndef TUNEHOST_SDK_SDK_H
#define TUNEHOST_SDK_SDK_H

#include "tunehost/sdk/assessor.h"
#include "tunehost/sdk/host.h"
#include "tunehost/sdk/plugin.h"
#include "tunehost/sdk/status.h"
#include "tunehost/sdk/tuner.h"
#include "tunehost/sdk/version.h"

#endif /* TUNEHOST_SDK_SDK_H */
