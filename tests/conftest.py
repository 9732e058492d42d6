from ref.testing import profiles

profiles.load()
