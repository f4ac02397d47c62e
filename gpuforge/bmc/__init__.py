"""Baseboard management controllers: power through Redfish (``gpuforge power``).

This is the first slice of bare-metal bring-up: Redfish power status/on/off/cycle with the
day-2 rules. IPMI, network boot (PXE) and provisioning are not built yet.
"""
