# `make package`: a Debian package with the GUI, the CLI, the executor and the examples.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "pipestudio")
set(CPACK_PACKAGE_CONTACT "PipeStudio team <pipestudio@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Workstation for pipeline-parallel training: plan, simulate, run, compare")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
include(CPack)
