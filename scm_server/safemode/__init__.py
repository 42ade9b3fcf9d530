"""Safemode: SCMSafeModeManager and its exit rules."""
