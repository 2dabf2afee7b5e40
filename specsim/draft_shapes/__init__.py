"""Drafts: block plans, token trees and their search, draft-length policies, adaptive ensembles."""
