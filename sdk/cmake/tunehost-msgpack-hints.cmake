# TH_MSGPACK_CXX_HINTS: where msgpack-cxx's CMake config may be, for
# find_package(msgpack HINTS ...). msgpack-cxx installs msgpack-config.cmake
# in cmake/msgpackc-cxx/, and msgpack-c, the C library (Debian's
# libmsgpack-dev, what C plugin authors use), one of the same package name in
# cmake/msgpack/; without hints either may be found first.
set(TH_MSGPACK_CXX_HINTS "")
foreach(_th_prefix IN LISTS CMAKE_PREFIX_PATH CMAKE_SYSTEM_PREFIX_PATH)
  foreach(_th_sub IN ITEMS "lib/${CMAKE_LIBRARY_ARCHITECTURE}/cmake" "lib/cmake" "share/cmake")
    list(APPEND TH_MSGPACK_CXX_HINTS "${_th_prefix}/${_th_sub}/msgpackc-cxx")
  endforeach()
endforeach()
