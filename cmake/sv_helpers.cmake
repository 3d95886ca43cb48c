# sv_test(NAME SOURCES src... [LIBS lib...] [LABELS label...] [TIMEOUT seconds])
# A test program linked with cmocka; registered with ctest under NAME. Its RUNPATH
# points at the build tree's lib/, so it loads softverbs' libibverbs.so.1, never the
# system's.
function(sv_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${name} PRIVATE ${T_LIBS} ${CMOCKA_LIBRARIES} Threads::Threads)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
    ENVIRONMENT "SOFTVERBS_LOG=error")
endfunction()
