# ctest helper: fail unless FILE has a DT_NEEDED entry for NEEDED.
#   cmake -DREADELF=readelf -DFILE=<binary> -DNEEDED=<soname> -P check_needed.cmake
execute_process(COMMAND "${READELF}" -d "${FILE}" OUTPUT_VARIABLE _dyn RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${FILE} failed (${_rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" _needed "${_dyn}")
string(REPLACE ";" "\n" _needed_lines "${_needed}")
message(STATUS "${FILE}:\n${_needed_lines}")
string(FIND "${_dyn}" "[${NEEDED}]" _at)
if(_at EQUAL -1)
  message(FATAL_ERROR "${FILE} has no DT_NEEDED ${NEEDED}: the linker dropped it")
endif()
