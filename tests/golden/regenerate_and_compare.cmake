# cmake -DPYTHON=... -DGENERATOR=... -DOUTPUT=... -DCOMMITTED=... -P regenerate_and_compare.cmake
# Runs `PYTHON GENERATOR > OUTPUT` and fails, showing the difference, unless OUTPUT equals
# COMMITTED.
execute_process(COMMAND ${PYTHON} ${GENERATOR} OUTPUT_FILE ${OUTPUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${GENERATOR} failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${COMMITTED} ${OUTPUT}
                RESULT_VARIABLE differs)
if(differs)
  find_program(DIFF diff)
  if(DIFF)
    execute_process(COMMAND ${DIFF} -u ${COMMITTED} ${OUTPUT})
  endif()
  message(FATAL_ERROR "${COMMITTED} is not what ${GENERATOR} writes (now in ${OUTPUT}); "
                      "regenerate it: python3 ${GENERATOR} > ${COMMITTED}")
endif()
message(STATUS "${COMMITTED} equals the output of ${GENERATOR}")
