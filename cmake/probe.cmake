# The probe (`combine-lab probe`, docs/probe.md): kernels/probe_kernel.cpp and its driver
# host/probe_host.cpp, on either target, built only when asked (`cmake --build <dir> --target
# probe_host`; combine_lab/run/probe.py), so the combine's builds cost nothing more.
# Included from CMakeLists.txt after the combine's targets, in the same scope: on the twin it
# uses combine_twin_kernel_copy and combine_twin; on the NPU the kernel flags, definitions and
# link set cmake/npu.cmake chose for the combine kernel (combine_npu_kernel_library).
if(COMBINE_TARGET STREQUAL "cpu")
  combine_twin_kernel_copy("${CMAKE_CURRENT_SOURCE_DIR}/kernels/probe_kernel.cpp" _probe_kernel_copy)
  add_executable(probe_host EXCLUDE_FROM_ALL host/probe_host.cpp host/perf_csv.cpp "${_probe_kernel_copy}")
  target_include_directories(probe_host PRIVATE kernels host)
  target_link_libraries(probe_host PRIVATE combine_twin)
else()
  combine_npu_kernel_library(combine_probe_kernel EXCLUDE_FROM_ALL INCLUDES kernels host
                             SOURCES kernels/probe_kernel.cpp)
  add_executable(probe_host EXCLUDE_FROM_ALL host/probe_host.cpp host/perf_csv.cpp)
  target_include_directories(probe_host PRIVATE kernels host ${COMBINE_SHMEM_INCLUDES} ${COMBINE_CANN_INCLUDES})
  target_compile_definitions(probe_host PRIVATE ${_npu_defs})
  target_compile_options(probe_host PRIVATE ${COMBINE_SHMEM_CPP_FLAGS})
  target_link_directories(probe_host PRIVATE "${COMBINE_CANN_LIBDIR}")
  target_link_libraries(probe_host PRIVATE ${COMBINE_NPU_LINK_LIBS} "${COMBINE_SHMEM_LIB}" combine_probe_kernel)
  set_target_properties(probe_host PROPERTIES BUILD_RPATH "${_npu_rpath}")
endif()
