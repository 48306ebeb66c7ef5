"""The portal's benchmark: the portal path side by side with a direct SDK call (`make bench`)."""
