# pipestudio_module(<target>): our own code gets the strict warning set.
function(pipestudio_warnings target)
  # -Wshadow=local is GCC's; -Wrestrict/-Wstringop-overflow give GCC 12 false positives on
  # std::string concatenation (GCC PR 105329).
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wshadow=local>
    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict -Wno-stringop-overflow>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${PIPESTUDIO_WERROR}>>:-Werror>)
endfunction()

# pipestudio_library(<name> SOURCES ... [PUBLIC_LINK ...] [PRIVATE_LINK ...])
# One static library per module folder; public headers under include/pipestudio/<module>/.
function(pipestudio_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_LINK;PRIVATE_LINK" ${ARGN})
  add_library(ps_${name} STATIC ${ARG_SOURCES})
  add_library(PipeStudio::${name} ALIAS ps_${name})
  target_include_directories(ps_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
                                        PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(ps_${name} PUBLIC ${ARG_PUBLIC_LINK} PRIVATE ${ARG_PRIVATE_LINK})
  set_target_properties(ps_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  pipestudio_warnings(ps_${name})
endfunction()

# Qt code: the defines docs/style.md asks for.
function(pipestudio_qt_defines target)
  target_compile_definitions(${target} PRIVATE QT_NO_KEYWORDS QT_NO_CAST_FROM_ASCII
                             QT_USE_QSTRINGBUILDER QT_NO_FOREACH)
endfunction()
