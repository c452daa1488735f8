"""agents/sdk"""
