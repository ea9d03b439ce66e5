# What `cmake --install build` puts where. With the default prefix
# /usr/local, as root:
#   /usr/local/bin/tensord, /usr/local/bin/tensorctl
#   /usr/local/lib/systemd/system/tensord.service, tensord.socket
#   /usr/local/lib/sysusers.d/tensord.conf        (the `render` group the unit asks for)
#   /etc/tensord/tensord.json                     (only if absent: an edited config is kept)
#   /etc/tensord/policy.example.json
#   /usr/local/share/tensord/                     (pristine default config and the examples)
# systemd reads units and sysusers.d snippets under /usr/local/lib as well
# as /usr/lib. To stage a package or look first: DESTDIR=/tmp/x cmake
# --install build (every path above lands under /tmp/x).
include(GNUInstallDirs)

# The configuration belongs in /etc even for software under /usr/local
# (FHS); other prefixes keep it under the prefix.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr" OR CMAKE_INSTALL_PREFIX STREQUAL "/usr/local")
  set(_tensord_sysconfdir "/etc")
else()
  set(_tensord_sysconfdir "${CMAKE_INSTALL_PREFIX}/etc")
endif()
set(TENSORD_SYSCONFDIR "${_tensord_sysconfdir}" CACHE PATH "Directory that holds tensord/tensord.json")
set(TENSORD_UNITDIR "lib/systemd/system" CACHE STRING "systemd system units, relative to the prefix")
set(TENSORD_SYSUSERSDIR "lib/sysusers.d" CACHE STRING "sysusers.d snippets, relative to the prefix")

# The repository's unit is written for the default layout (it is what
# `systemd-analyze verify` checks); the installed one names the paths of this
# build's layout.
set(_tensord_units "${CMAKE_BINARY_DIR}/systemd")
foreach(unit tensord.service tensord.socket)
  file(READ "${PROJECT_SOURCE_DIR}/systemd/${unit}" _text)
  string(REPLACE "/usr/local/bin/tensord" "${CMAKE_INSTALL_FULL_BINDIR}/tensord" _text "${_text}")
  string(REPLACE "/etc/tensord/" "${TENSORD_SYSCONFDIR}/tensord/" _text "${_text}")
  file(CONFIGURE OUTPUT "${_tensord_units}/${unit}" CONTENT "${_text}" @ONLY)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/systemd/${unit}")
endforeach()

install(TARGETS tensord tensorctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES "${_tensord_units}/tensord.service" "${_tensord_units}/tensord.socket" DESTINATION ${TENSORD_UNITDIR})
install(FILES systemd/tensord.sysusers DESTINATION ${TENSORD_SYSUSERSDIR} RENAME tensord.conf)
install(FILES config/tensord.json config/tensord.example.json config/policy.example.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/tensord)
install(FILES config/policy.example.json DESTINATION ${TENSORD_SYSCONFDIR}/tensord)
# An installed config holds the operator's tokens: installing again must not
# replace it. Mode 0644: the service's dynamic user has to read it.
install(CODE "
  set(_config \"\$ENV{DESTDIR}${TENSORD_SYSCONFDIR}/tensord/tensord.json\")
  if(EXISTS \"\${_config}\")
    message(STATUS \"Keeping: \${_config} (already there)\")
  else()
    # file(INSTALL) puts DESTDIR in front by itself.
    file(INSTALL \"${PROJECT_SOURCE_DIR}/config/tensord.json\" DESTINATION \"${TENSORD_SYSCONFDIR}/tensord\"
         FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  endif()
")
