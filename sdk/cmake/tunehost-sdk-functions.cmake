# th_add_plugin(<name> SOURCES <src>... [OUTPUT_DIRECTORY <dir>])
#
# Builds a tunehost plugin: a MODULE library exporting only th_plugin_entry,
# with no undefined symbols, linked against the SDK alone. Used the same way for
# built-in plugins and by outside authors through find_package(tunehost-sdk).
function(th_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "OUTPUT_DIRECTORY" "SOURCES")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "th_add_plugin(${name}): SOURCES is required")
  endif()
  add_library(${name} MODULE ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE tunehost::sdk)
  set_target_properties(${name} PROPERTIES
    PREFIX ""
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  if(NOT APPLE AND NOT WIN32)
    target_link_options(${name} PRIVATE "LINKER:-z,defs")
  endif()
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  endif()
endfunction()
