"""Model pieces shared across parts: the tiny pre-LN transformer and the selective scan (three forms)."""
