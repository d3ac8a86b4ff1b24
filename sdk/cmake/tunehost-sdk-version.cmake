# TH_SDK_VERSION (and _MAJOR, _MINOR, _REVISION), read from the one header
# that defines the ABI version.
file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../include/tunehost/sdk/version.h" _th_ver
     REGEX "^#define TH_VERSION_(MAJOR|MINOR|REVISION) [0-9]+$")
foreach(_line IN LISTS _th_ver)
  string(REGEX MATCH "TH_VERSION_([A-Z]+) ([0-9]+)" _m "${_line}")
  set(TH_SDK_VERSION_${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
endforeach()
set(TH_SDK_VERSION "${TH_SDK_VERSION_MAJOR}.${TH_SDK_VERSION_MINOR}.${TH_SDK_VERSION_REVISION}")
