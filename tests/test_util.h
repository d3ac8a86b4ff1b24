// Shared test helpers.
#pragma once

#include <gtest/gtest.h>

#include "tunehost/status.h"

#define ASSERT_OK(expr)                                         \
  do {                                                          \
    const ::tunehost::Status _th_st = (expr);                   \
    ASSERT_TRUE(_th_st.ok()) << #expr << " -> " << _th_st.ToString(); \
  } while (0)

#define EXPECT_OK(expr)                                         \
  do {                                                          \
    const ::tunehost::Status _th_st = (expr);                   \
    EXPECT_TRUE(_th_st.ok()) << #expr << " -> " << _th_st.ToString(); \
  } while (0)
