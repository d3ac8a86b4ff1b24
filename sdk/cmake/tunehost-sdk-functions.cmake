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
    # Hidden visibility does not cover the std:: templates libstdc++ marks as
    # default-visible (some as STB_GNU_UNIQUE, which would pin the plugin in
    # memory forever): a version script makes everything but the entry local.
    set(_th_map "${CMAKE_BINARY_DIR}/CMakeFiles/tunehost-plugin.map")
    if(NOT EXISTS "${_th_map}")
      file(WRITE "${_th_map}" "{\n  global: th_plugin_entry;\n  local: *;\n};\n")
    endif()
    target_link_options(${name} PRIVATE "LINKER:-z,defs" "LINKER:--version-script=${_th_map}")
    set_property(TARGET ${name} APPEND PROPERTY LINK_DEPENDS "${_th_map}")
  endif()
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${name} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  endif()
endfunction()
